-- crash: SIGSEGV (signal 11)
-- seed 16993465321422043183: atoll fuzz-sql --seed 16993465321422043183 (cases of a seed are the same whatever runs before them)
-- found 2026-11-27T16:41:15Z by scripts/fuzz-sql.sh (atoll 0.1.0)
-- the last statement below is the one that was running; the run's last words on stderr:
-- atoll fuzz-sql --seed 16993465321422043183: case 77 (object storage: wal_autocheckpoint = 0)
CREATE TABLE IF NOT EXISTS t4 (c0 TEXT DEFAULT '  12  ') STRICT;
CREATE TABLE IF NOT EXISTS t3 AS SELECT x'05' AS a0, (j1_2.x -> '$.a.b') AS a1, (octet_length(vector16('[]')) COLLATE BINARY) AS a2 FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 8) SELECT x FROM s) AS j1_0 NATURAL JOIN (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 53) SELECT x FROM s) AS j1_1 FULL JOIN (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 54) SELECT x FROM s) AS j1_2 ON ('{a:1}' <= j1_0.x) WHERE (x'06' NOT BETWEEN zeroblob(4096) AND 255) LIMIT 138;
SELECT 'main', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM main.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'main') AS p WHERE m.name NOT LIKE 'sqlite_%' UNION ALL SELECT 'temp', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM temp.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'temp') AS p;
CREATE INDEX i1 ON t4(c0 DESC, c0 ASC);
SELECT 'main', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM main.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'main') AS p WHERE m.name NOT LIKE 'sqlite_%' UNION ALL SELECT 'temp', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM temp.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'temp') AS p;
SELECT geopoly_area(x'5d028b'), "current_date"(), json_patch('abc', 'xx b', nullif(-66.57, '[NaN, 1]'), 'not alpha');
SELECT rtreenode(2, x'b62e'), rtreedepth(x'b62e');
VACUUM;
SELECT 'main', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM main.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'main') AS p WHERE m.name NOT LIKE 'sqlite_%' UNION ALL SELECT 'temp', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM temp.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'temp') AS p;
CREATE TABLE t3 (c0 REAL, c1 F1BIT_BLOB(4), c2 INTEGER PRIMARY KEY AUTOINCREMENT, c3 F64_BLOB(65535), c4 BLOB UNIQUE) WITHOUT ROWID, STRICT;
SELECT 'main', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM main.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'main') AS p WHERE m.name NOT LIKE 'sqlite_%' UNION ALL SELECT 'temp', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM temp.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'temp') AS p;
CREATE TABLE IF NOT EXISTS t3 (c0 TEXT, c1 FB16_BLOB(4) COLLATE RTRIM, c2 INT UNIQUE, FOREIGN KEY (c1) REFERENCES t3);
SELECT 'main', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM main.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'main') AS p WHERE m.name NOT LIKE 'sqlite_%' UNION ALL SELECT 'temp', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM temp.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'temp') AS p;
DELETE FROM t3;
SELECT * FROM t0 WHERE t0 MATCH '*';
INSERT INTO t4 (c0) VALUES (x'e39d58de0a0dcf3b483b728d42af8ac1fcb7b7459cf814c8eb6d43628d0dda1739bb2fb979ea406ab8268a8e0d3499ed50998609d8c24e7244'), (printf('%.*c', 65535, 'x')), (100);
UPDATE OR IGNORE t4 SET c0 = '"str"';
BEGIN;
SELECT 'main', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM main.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'main') AS p WHERE m.name NOT LIKE 'sqlite_%' UNION ALL SELECT 'temp', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM temp.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'temp') AS p;
INSERT INTO t4 (c0) VALUES (1.5);
SELECT json_pretty((SELECT vector32('[-8.171,7.431,0.227,2]') AS a0 FROM t3 AS j3_0 GROUP BY json_array_length(j3_0.a0, (j3_0.a0 IN (j3_0.rowid, j3_0.a1, j3_0.a0))) HAVING CASE WHEN j3_0.a0 THEN (x'069606' || j3_0.a2) WHEN NULL THEN randomblob(1) ELSE printf('%.*q', 9223372036854775807, NULL) END ORDER BY 1 DESC), x'39b663e96ad354419cfdc6ba623bbc7bb5fcd0e6da5afdca8079f3321911f526ce5ea82076f698ac3b443409bc41360bf7e55d8deb364bb56dc5af28c650acfea832a514e56ee283aaa2c3206ab2'), unhex(CAST(load_extension(jsonb_object('beta or c', json(x'ec08'), '%s%s%s%n'), (char(-1) COLLATE RTRIM)) AS TEXT), CAST((-2147483648 IN ((NULL GLOB 'a%b_c'))) AS NUMERIC));
SELECT DISTINCT j0_1.a1 AS a0, x'0d993ced2dc14f4c824607' AS a1, (SELECT 7 AS a0 FROM t4 AS j3_0) AS a2 FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 36) SELECT x FROM s) AS j0_0 FULL JOIN (SELECT randomblob(3) || json_pretty(datetime(j1_0."type", j1_0."dflt_value", j1_0."cid", j1_0."cid", j1_0."pk"), (NULL NOT BETWEEN 9.2233720368547758e18 AND j1_0."type")) AS a0, j1_0."hidden" AS a1, j1_0."hidden" AS a2 FROM pragma_table_xinfo('t3') AS j1_0 WHERE CASE x'dc7728aac44ff7502c2a9148d905405b90c8a3bbc5d5d1bcbc32c52b7563d23959cc6d3f64e6a0fbfdd8e4ffaad479a0489bb18b7704d065e0c88484063567b2c31f899f34b54d266c3963f8c7' WHEN (-0.0 IN ((j1_0."name" IS NOT NULL), j1_0."hidden", j1_0."name")) THEN (j1_0."name" -> vector32('[-7.113,4.937,-4.612,-1,0,7.194]')) END ORDER BY j1_0."hidden" ASC NULLS LAST LIMIT 186 OFFSET -0) AS j0_1 ON j0_1.a2 ORDER BY 2 LIMIT 93;
SELECT * FROM t0 WHERE t0 MATCH 84.9;
INSERT OR FAIL INTO t4 DEFAULT VALUES;
EXPLAIN UPDATE OR IGNORE t3 SET a0 = x'', a2 = -1;
SELECT jsonb('[Infinity,NaN,-Infinity]'), unixepoch('2024-02-30', 'localtime'), json_extract((printf('%.*c', 10, '[') || '1' || printf('%.*c', 10, ']')), '$.b[2]');
SELECT quote(json(x'99cdd000148965a894ce5f4e6ea562614a470d3a35f8f7f9a50f09d626a63fef8204e648'), printf('%.*c', 7, 'x'), (SELECT (((j3_0.rowid IN (j3_0.a0, 1e308, '["\u00')) IS NOT NULL) IN (SELECT 39 AS a0 FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 164) SELECT x FROM s) AS j3_0 GROUP BY j3_0.x HAVING 22 ORDER BY j3_0.x DESC LIMIT 54 OFFSET 1000000)) AS a0 FROM t3 AS j3_0)), printf(16, (last_insert_rowid() + 'hello hello'), 1e999, 256, json_type('/* c */ [1]', '$[0]'), json_pretty('"str"')), jsonb_patch(char('1e999', (CASE WHEN '/* c */ [1]' THEN '1e999' WHEN 0.5 THEN 12 WHEN char(0) THEN 1e19 ELSE vector32('[2.937,-8.164,-4.969,-3,2.578,-3.756,-2.262]') END >> CAST(vector8('[-1.631]') AS BLOB)), timediff(-41.71, vector1bit('[]')), 0), NULL);
SELECT printf('%*.*f %T %! %c', (1e999 - 1e999), (unhex(x'12553c6a59c6d3', cast(x'ff' AS TEXT)) -> 2), 65537, 'x delta', x'e90c8dfe8f0243664bc964ea', vector8('[]'));
DROP TABLE IF EXISTS t3;
SELECT 'main', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM main.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'main') AS p WHERE m.name NOT LIKE 'sqlite_%' UNION ALL SELECT 'temp', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM temp.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'temp') AS p;
SELECT jsonb(subtype(((-2147483649 COLLATE RTRIM) IN ())));
SELECT format('%S', x'bcc24805', x'04');
EXPLAIN UPDATE OR IGNORE t3 SET a0 = x'', a2 = -1;
