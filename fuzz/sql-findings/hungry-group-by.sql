-- memory and time: GROUP BY 33 MB keys over 100 rows. Measured: peak RSS 3.4 GB, 19.8 s
-- with a 1 s deadline. A campaign run saw +4,971 MiB for a similar GROUP BY over
-- pragma_function_list().
SELECT count(*) FROM (SELECT x FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 100) SELECT x FROM s) GROUP BY substr(zeroblob(33000000), x, 2147483647));
