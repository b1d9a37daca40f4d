-- memory leak: vectorVtabFilter sets the cursor's result rows to NULL without freeing the
-- previous ones, so a vector_top_k filtered again (the inner loop of a join, a correlated
-- subquery) loses each earlier result for good. Measured: RSS +4 to +6 MiB per statement
-- below (1 s deadline), never given back; with the node's 30 s deadline ~150 MiB per
-- statement, repeatable.
CREATE TABLE v (id INTEGER PRIMARY KEY, e F32_BLOB(2));
CREATE INDEX vi ON v(libsql_vector_idx(e));
INSERT INTO v(e) WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 60) SELECT vector32('[' || x || ', 1]') FROM s;
CREATE TABLE big (x);
INSERT INTO big WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 100000) SELECT x FROM s;
SELECT count(*) FROM big AS a CROSS JOIN vector_top_k('vi', vector32('[1,1]'), 60) AS b;
SELECT count(*) FROM big AS a CROSS JOIN vector_top_k('vi', vector32('[1,1]'), 60) AS b;
SELECT count(*) FROM big AS a CROSS JOIN vector_top_k('vi', vector32('[1,1]'), 60) AS b;
SELECT count(*) FROM big AS a CROSS JOIN vector_top_k('vi', vector32('[1,1]'), 60) AS b;
SELECT count(*) FROM big AS a CROSS JOIN vector_top_k('vi', vector32('[1,1]'), 60) AS b;
