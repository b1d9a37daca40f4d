-- crash: SIGSEGV (signal 11)
-- written by hand: the bug of crash-897322aee4ecb785.sql (found by the fuzzer), deterministic: a DiskANN node's neighbour count (bytes 8-9 of its blob in <index>_shadow) set to 65535, then a search
-- found 2026-11-27; kills atoll fuzz-sql --replay
-- the last statement below is the one that was running
CREATE TABLE v (id INTEGER PRIMARY KEY, e F32_BLOB(4));
CREATE INDEX vi ON v(libsql_vector_idx(e));
INSERT INTO v(e) WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 50) SELECT vector32('[' || x || ',1,2,3]') FROM s;
UPDATE vi_shadow SET data = substr(data, 1, 8) || x'ffff' || substr(data, 11);
SELECT id FROM vector_top_k('vi', vector32('[1,2,3,4]'), 5);
