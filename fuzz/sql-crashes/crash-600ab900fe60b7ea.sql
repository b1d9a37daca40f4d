-- crash: SIGSEGV (signal 11)
-- written by hand: the bug of crash-3dd2848d9b1728f6.sql (found by the fuzzer, seed 13584781823850731624), in a form that crashes whatever the heap looks like: a hidden column (k) of vector_top_k on a table without rowid, with a result array large enough to come from malloc
-- found 2026-11-27; kills atoll dev (tests/sql_crash_corpus.rs) and atoll fuzz-sql --replay
-- the last statement below is the one that was running
CREATE TABLE w (id TEXT PRIMARY KEY, e F32_BLOB(2)) WITHOUT ROWID;
CREATE INDEX wi ON w(libsql_vector_idx(e));
INSERT INTO w WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 300) SELECT 'k' || x, vector32('[' || x || ', 1]') FROM s;
SELECT k, id FROM vector_top_k('wi', vector32('[1,2]'), 300);
