-- Leases of the background jobs, so several control-plane replicas can run them without
-- doing the same work twice. Keep in step with ../sqlite/0006_jobs.sql.

CREATE TABLE job_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
