-- Usage, per database instance and hour, as collected from the data nodes. Rows outlive
-- their database: they are what the organization consumed. Keep in step with
-- ../sqlite/0004_usage.sql.

CREATE TABLE usage_buckets (
    database_id  TEXT NOT NULL,
    org_id       TEXT NOT NULL,
    -- Start of the hour, milliseconds since the epoch.
    bucket       BIGINT NOT NULL,
    rows_read    BIGINT NOT NULL DEFAULT 0,
    rows_written BIGINT NOT NULL DEFAULT 0,
    bytes_synced BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (database_id, org_id, bucket)
);
CREATE INDEX usage_buckets_by_org ON usage_buckets (org_id, bucket);

-- Batches of usage already stored: a node hands a batch out until it is acknowledged, and
-- one stored twice must count once.
CREATE TABLE usage_batches (
    batch_id     TEXT PRIMARY KEY,
    collected_at BIGINT NOT NULL
);
