-- The store is the desired state of every node (docs/STORAGE.md, "The reconciler").
-- Keep in step with ../sqlite/0010_intent.sql.

-- Bumped by every change a database's node must see (flags, keys, state, label, its
-- group's archive and keys, its organization's blocks). A node keeps the version it was
-- last given and ignores an older one; the reconciler pushes the configuration of every
-- database whose node reports a lower version.
ALTER TABLE databases ADD COLUMN config_version BIGINT NOT NULL DEFAULT 1;

-- Databases the store forgot (purged, or deleted with their group or organization) whose
-- node may still hold them: the reconciler deletes them there by id, then the tombstone.
CREATE TABLE database_tombstones (
    id           TEXT PRIMARY KEY,
    node         TEXT NOT NULL,
    forgotten_at BIGINT NOT NULL
);
