-- Identity and organization metadata. Times are milliseconds since the Unix epoch;
-- booleans are 0/1. Keep in step with ../sqlite/0001_identity.sql.

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    username      TEXT NOT NULL UNIQUE,
    email         TEXT NOT NULL DEFAULT '',
    name          TEXT NOT NULL DEFAULT '',
    password_hash TEXT NOT NULL,
    is_admin      BIGINT NOT NULL DEFAULT 0,
    created_at    BIGINT NOT NULL
);

CREATE TABLE organizations (
    id             TEXT PRIMARY KEY,
    slug           TEXT NOT NULL UNIQUE,
    name           TEXT NOT NULL,
    kind           TEXT NOT NULL,
    overages       BIGINT NOT NULL DEFAULT 0,
    require_mfa    BIGINT NOT NULL DEFAULT 0,
    blocked_reads  BIGINT NOT NULL DEFAULT 0,
    blocked_writes BIGINT NOT NULL DEFAULT 0,
    plan_id        TEXT NOT NULL DEFAULT 'starter',
    plan_timeline  TEXT NOT NULL DEFAULT 'monthly',
    created_at     BIGINT NOT NULL
);

CREATE TABLE memberships (
    org_id     TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX memberships_by_user ON memberships (user_id);

CREATE TABLE invites (
    id         BIGSERIAL PRIMARY KEY,
    org_id     TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    email      TEXT NOT NULL DEFAULT '',
    username   TEXT NOT NULL DEFAULT '',
    role       TEXT NOT NULL,
    invited_by TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX invites_by_org_email ON invites (org_id, email) WHERE email <> '';
CREATE UNIQUE INDEX invites_by_org_username ON invites (org_id, username) WHERE username <> '';

CREATE TABLE org_groups (
    id                TEXT PRIMARY KEY,
    org_id            TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name              TEXT NOT NULL,
    primary_location  TEXT NOT NULL,
    locations         TEXT NOT NULL,
    version           TEXT NOT NULL,
    delete_protection BIGINT NOT NULL DEFAULT 0,
    archived          BIGINT NOT NULL DEFAULT 0,
    created_at        BIGINT NOT NULL,
    last_activity_at  BIGINT NOT NULL,
    UNIQUE (org_id, name)
);

-- Platform API tokens and login tokens. Rows are never deleted, only revoked, so a
-- revoked secret keeps answering 401 rather than "unknown".
CREATE TABLE api_tokens (
    id           TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    secret_hash  TEXT NOT NULL UNIQUE,
    org_id       TEXT,
    group_id     TEXT,
    scopes       TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    last_used_at BIGINT,
    revoked_at   BIGINT
);
CREATE UNIQUE INDEX api_tokens_active_name ON api_tokens (user_id, name)
    WHERE kind = 'api' AND revoked_at IS NULL;
CREATE INDEX api_tokens_by_org ON api_tokens (org_id);
CREATE INDEX api_tokens_by_group ON api_tokens (group_id);
