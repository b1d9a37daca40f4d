-- Each organization's certificate authority for TLS client certificates of its databases
-- (docs/API.md, "TLS client certificates"). `id` is the organization's id; `signing_key`
-- is the CA's private key (PEM), sealed like the other signing keys (same column name, so
-- the same re-sealing covers it). Keep in step with ../sqlite/0014_client_cas.sql.
CREATE TABLE org_client_cas (
    id          TEXT PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    certificate TEXT NOT NULL,
    signing_key TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
