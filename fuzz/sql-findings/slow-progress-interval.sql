-- slow: the sandbox's progress handler runs every 10,000 VDBE instructions
-- (sandbox::PROGRESS_INTERVAL); a row that makes a 32 MiB value costs ~18 ms in a handful
-- of instructions, so 10,000 instructions take ~36 s. Measured with a 1 s deadline:
-- 36.3 s for the second statement, 15.6 s for the first; 18.8 s and 7.4 s with the
-- engine's "bounded work" patch (the engine of commit 30116d3). The deadline, the client's
-- cancellation and SIGTERM all wait for the next call.
SELECT count(length(printf('%.*c', 16777216 - (x % 2), 'x'))) FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 2000) SELECT x FROM s);
SELECT count(length(zeroblob(33554431 - (x % 2)) || x'00')) FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 2000) SELECT x FROM s);
