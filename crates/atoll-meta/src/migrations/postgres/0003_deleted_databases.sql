-- Deleted databases stay restorable for a while (paid plans): they keep their row, marked
-- deleted, and free their name and hostname for new databases.
-- Keep in step with ../sqlite/0003_deleted_databases.sql.

ALTER TABLE databases ADD COLUMN deleted_at BIGINT;
DROP INDEX databases_by_org_name;
DROP INDEX databases_by_label;
CREATE UNIQUE INDEX databases_by_org_name ON databases (org_id, name) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX databases_by_label ON databases (label) WHERE deleted_at IS NULL;
