-- Storage over time: each database's size, sampled by the usage collector, one row per
-- database and hour (the last size measured in that hour). Rows outlive their database,
-- as usage buckets do, and are pruned after the retention the collector applies
-- (docs/OPERATIONS.md, "Usage"). Keep in step with ../sqlite/0017_storage_samples.sql.

CREATE TABLE storage_samples (
    database_id   TEXT NOT NULL,
    org_id        TEXT NOT NULL,
    -- Start of the hour, milliseconds since the epoch.
    bucket        BIGINT NOT NULL,
    storage_bytes BIGINT NOT NULL,
    PRIMARY KEY (database_id, bucket)
);
CREATE INDEX storage_samples_by_org ON storage_samples (org_id, bucket);
CREATE INDEX storage_samples_by_bucket ON storage_samples (bucket);
