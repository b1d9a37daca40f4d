-- Transfers start a database's history anew (docs/STORAGE.md, "Transfers start the
-- history anew"): when its current owner's history starts, in ms since the epoch. NULL:
-- at its creation. Point-in-time copies, restores and embedded replicas never reach
-- before it. Keep in step with ../sqlite/0020_history_start.sql.

ALTER TABLE databases ADD COLUMN history_starts_at BIGINT;
