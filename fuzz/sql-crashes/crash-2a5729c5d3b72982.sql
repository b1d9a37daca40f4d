-- crash: SIGSEGV (signal 11)
-- written by hand: the bug of crash-91e1d61ca24d353b.sql (found by the fuzzer, seed 16993465321422043183): an EXPLAIN of a write, prepared once (the statement cache) and run again after the table it names was dropped, lists its program's P4 operands, among them the freed Table's name
-- found 2026-11-27; kills atoll dev (tests/sql_crash_corpus.rs) and atoll fuzz-sql --replay
-- the last statement below is the one that was running
CREATE TABLE t (a);
EXPLAIN INSERT INTO t VALUES (1);
DROP TABLE t;
EXPLAIN INSERT INTO t VALUES (1);
