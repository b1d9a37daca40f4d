-- Tenant isolation, control-plane part (issue 10). Keep in step with
-- ../sqlite/0007_isolation_control.sql.

-- Dumps expire and count against a per-organization limit of pending bytes: their size is
-- kept beside their text, so the limit is a sum over a few rows, not a read of every dump.
ALTER TABLE dumps ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;
UPDATE dumps SET bytes = octet_length(sql);
CREATE INDEX dumps_by_org ON dumps (org_id, created_at);
CREATE INDEX dumps_by_age ON dumps (created_at);

-- `POST /v1/auth/invalidate` revokes every login token of one user.
CREATE INDEX api_tokens_by_user ON api_tokens (user_id, kind);
