-- A database's own durability mode (docs/STORAGE.md, "Durability modes"): `lag` or
-- `sync`; NULL follows its node's `--durability`. Keep in step with the other backend.
ALTER TABLE databases ADD COLUMN durability TEXT;
