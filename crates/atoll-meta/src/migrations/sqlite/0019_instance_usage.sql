-- Usage per instance (issue 13): what each location's instance of a database served, per
-- hour, beside the per-database buckets (which the organization's totals keep reading).
-- `instance` is the location code of the node that metered it. Keep in step with
-- ../postgres/0019_instance_usage.sql.

CREATE TABLE usage_instance_buckets (
    database_id  TEXT NOT NULL,
    org_id       TEXT NOT NULL,
    instance     TEXT NOT NULL,
    bucket       INTEGER NOT NULL,
    rows_read    INTEGER NOT NULL DEFAULT 0,
    rows_written INTEGER NOT NULL DEFAULT 0,
    bytes_synced INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (database_id, org_id, instance, bucket)
);
CREATE INDEX usage_instance_buckets_by_org ON usage_instance_buckets (org_id, bucket);
