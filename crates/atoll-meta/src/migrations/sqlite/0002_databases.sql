-- Databases, their signing keys, idempotent creates and uploaded dumps.
-- Keep in step with ../postgres/0002_databases.sql.

-- Each group signs its group tokens with its own Ed25519 key (URL-safe base64).
ALTER TABLE org_groups ADD COLUMN signing_key TEXT NOT NULL DEFAULT '';
ALTER TABLE org_groups ADD COLUMN key_id TEXT NOT NULL DEFAULT '';

CREATE TABLE databases (
    id                TEXT PRIMARY KEY,
    org_id            TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    group_id          TEXT NOT NULL REFERENCES org_groups (id) ON DELETE CASCADE,
    name              TEXT NOT NULL,
    -- First label of the hostname, `<name>-<org slug>`: unique across the instance.
    label             TEXT NOT NULL,
    -- creating | awaiting_upload | active
    state             TEXT NOT NULL,
    location          TEXT NOT NULL,
    node              TEXT NOT NULL,
    size_limit        INTEGER,
    block_reads       INTEGER NOT NULL DEFAULT 0,
    block_writes      INTEGER NOT NULL DEFAULT 0,
    delete_protection INTEGER NOT NULL DEFAULT 0,
    allow_attach      INTEGER NOT NULL DEFAULT 0,
    allowed_ips       TEXT NOT NULL DEFAULT '',
    parent_id         TEXT,
    parent_name       TEXT,
    branched_at       INTEGER,
    signing_key       TEXT NOT NULL,
    key_id            TEXT NOT NULL,
    created_at        INTEGER NOT NULL
);
CREATE UNIQUE INDEX databases_by_org_name ON databases (org_id, name);
CREATE UNIQUE INDEX databases_by_label ON databases (label);
CREATE INDEX databases_by_group ON databases (group_id);

-- The first answer to a create sent with an `Idempotency-Key`, to replay on retries.
CREATE TABLE idempotency_keys (
    org_id      TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    response    TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (org_id, key)
);

-- SQL dumps uploaded with `POST …/databases/dumps`, kept until used as a seed.
CREATE TABLE dumps (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    sql        TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
