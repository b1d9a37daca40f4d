-- The audit log: one row per state-changing action in an organization, newest read first.
-- Entries go with their organization. `author` is a username, not a reference, so an
-- entry outlives its author. `data` is a JSON object.
-- Keep in step with ../postgres/0005_audit_logs.sql.

CREATE TABLE audit_logs (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id     TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    code       TEXT NOT NULL,
    message    TEXT NOT NULL,
    origin     TEXT NOT NULL,
    author     TEXT NOT NULL,
    data       TEXT NOT NULL DEFAULT '{}',
    created_at INTEGER NOT NULL
);
CREATE INDEX audit_logs_by_org ON audit_logs (org_id, created_at);
