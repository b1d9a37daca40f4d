-- slow: an FTS3/FTS4 MATCH expression is parsed in time quadratic in its number of terms
-- (fts3ExprParse, inside fts3FilterMethod: one VDBE instruction, so the progress handler
-- never runs). Measured with a 1 s deadline: 16,384 terms 0.67 s, 32,768 2.4 s,
-- 65,536 9.7 s; the "maximum depth 12" error comes after the whole tree is built. A MATCH
-- string of a few MiB holds an SQL thread for hours, deaf to the deadline, the client
-- going away and SIGTERM. Found by scripts/test.sh's fixed seed (20260026).
CREATE VIRTUAL TABLE f USING fts4(x);
INSERT INTO f VALUES ('alpha beta'), ('gamma 0 5 1');
SELECT count(*) FROM f WHERE f MATCH ('[' || replace(printf('%.*c', 16384, 'x'), 'x', '0.5,') || '1]');
SELECT count(*) FROM f WHERE f MATCH ('[' || replace(printf('%.*c', 32768, 'x'), 'x', '0.5,') || '1]');
SELECT count(*) FROM f WHERE f MATCH ('[' || replace(printf('%.*c', 65536, 'x'), 'x', '0.5,') || '1]');
