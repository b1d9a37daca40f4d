-- crash: SIGSEGV (signal 11)
-- seed 12188790315456102337: atoll fuzz-sql --seed 12188790315456102337 --statement-memory 2097152 (cases of a seed are the same whatever runs before them)
-- found 2026-11-27T18:48:08Z by scripts/fuzz-sql.sh (atoll 0.1.0)
-- the last statement below is the one that was running; the run's last words on stderr:
-- atoll fuzz-sql --seed 12188790315456102337: case 2053 (no object storage)
-- shrunk by hand to the table and the culprit (the campaign's case had 25 statements)
CREATE TABLE t5 (c0 BLOB, c1 F1BIT_BLOB NOT NULL DEFAULT 0);
CREATE INDEX i4 ON t5((libsql_vector_idx()) ASC) WHERE sign(c0);
