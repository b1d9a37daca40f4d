-- memory and time: a window ordered by 16 MiB keys over 150 rows keeps them all in memory.
-- Measured: peak RSS 2.6 GB, 39.9 s with a 1 s deadline (and not interrupted).
SELECT count(*) FROM (SELECT max(x) OVER (ORDER BY randomblob(16777217) ROWS BETWEEN 4096 PRECEDING AND CURRENT ROW) FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 150) SELECT x FROM s));
