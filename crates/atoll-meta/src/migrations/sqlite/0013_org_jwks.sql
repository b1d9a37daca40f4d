-- Key sets (JWKS) an organization registered so that end users' JWTs from its own auth
-- provider query its databases (docs/API.md, "Bring your own auth provider").
-- Keep in step with ../postgres/0013_org_jwks.sql.
CREATE TABLE org_jwks (
    org_id       TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    -- Where the key set is fetched from; NULL for a key set given inline.
    url          TEXT,
    -- The public keys, normalized: a JSON array of JWKs (only the members verification needs).
    keys         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    -- Last successful fetch (or the registration of an inline key set).
    refreshed_at INTEGER NOT NULL,
    -- Why the last refresh failed; NULL once one succeeds.
    last_error   TEXT,
    PRIMARY KEY (org_id, name)
);
