-- Databases encrypted with their customer's key (Turso's `remote_encryption`,
-- docs/ENCRYPTION.md). The key itself is stored nowhere: only its cipher's name and a
-- verifier (HMAC-SHA256 keyed by the key over a fixed label and the database's id, hex),
-- which tells a wrong key from damaged data. NULL: not encrypted.
-- Keep in step with the other backend's 0021_remote_encryption.sql.

ALTER TABLE databases ADD COLUMN encryption_cipher TEXT;
ALTER TABLE databases ADD COLUMN encryption_verifier TEXT;
