// Compatibility of Atoll's data plane with the official libSQL client for Node,
// @libsql/client, over HTTP (Hrana 2, JSON: POST <url>v2/pipeline), driven against a
// running `atoll dev` (see scripts/compat.sh).
//
// Environment (set by scripts/compat.sh):
//   ATOLL_URL       http://127.0.0.1:PORT of the control plane (platform API)
//   ATOLL_TOKEN     login token of the instance administrator `admin`
//
// Every database is created through the platform API in the admin's personal
// organization, and the client is pointed at the database's `http_url`
// (http://127.0.0.1:<db port>/db/<db>-admin/): a path-prefixed URL that works without DNS.
// The client is used exactly as an application would; raw HTTP is used only for the
// platform API (create, tokens, configuration, rotation) and the upload of a file.

import { describe, test, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createClient, LibsqlError, LibsqlBatchError } from '@libsql/client';

const URL_BASE = (process.env.ATOLL_URL ?? '').replace(/\/+$/, '');
const ADMIN_TOKEN = process.env.ATOLL_TOKEN ?? '';
if (!URL_BASE || !ADMIN_TOKEN) {
  throw new Error(
    'ATOLL_URL and ATOLL_TOKEN must be set: run the suite with scripts/compat.sh',
  );
}
const ORG = 'admin';

// ---------------------------------------------------------------------------------------
// Helpers: the platform API

const RUN = randomBytes(3).toString('hex');
let counter = 0;
/** A unique database name (short: `<db>-<org>` must stay a valid host label). */
function uniq(prefix = 'lc') {
  counter += 1;
  return `${prefix}-${RUN}-${counter}`;
}

/** Raw HTTP against the platform API. Returns { status, body }. */
async function api(method, path, body) {
  const headers = { authorization: `Bearer ${ADMIN_TOKEN}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${URL_BASE}/v1/organizations/${ORG}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed };
}

async function apiOk(method, path, body) {
  const res = await api(method, path, body);
  assert.equal(
    res.status,
    200,
    `${method} ${path} answered ${res.status}: ${JSON.stringify(res.body)}`,
  );
  return res.body;
}

// The databases a test made, deleted when it ends: they count against the organization's
// plan quota (the starter plan allows 100).
const databases = [];
afterEach(async () => {
  for (const name of databases.splice(0)) {
    const res = await api('DELETE', `/databases/${name}`);
    assert.equal(res.status, 200, `DELETE ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  }
});

/** Creates a database and returns { name, url } with its http_url. */
async function newDatabase({ seed, name = uniq() } = {}) {
  const body = { name, group: 'default' };
  if (seed) body.seed = seed;
  const created = await apiOk('POST', '/databases', body);
  databases.push(name);
  assert.equal(created.database.Name, name);
  const { database } = await apiOk('GET', `/databases/${name}`);
  assert.equal(typeof database.http_url, 'string', 'the database has an http_url');
  assert.ok(
    database.http_url.endsWith('/'),
    `http_url ends with '/' so that clients resolve v2/pipeline under it: ${database.http_url}`,
  );
  return { name, url: database.http_url };
}

/** Mints a database token: authorization is 'full-access' or 'read-only'. */
async function dbToken(name, authorization = 'full-access', body) {
  const res = await apiOk(
    'POST',
    `/databases/${name}/auth/tokens?expiration=1h&authorization=${authorization}`,
    body,
  );
  assert.equal(typeof res.jwt, 'string');
  return res.jwt;
}

async function configure(name, changes) {
  return apiOk('PATCH', `/databases/${name}/configuration`, changes);
}

// Every client made by a test is closed at the end of the file.
const clients = [];
function client(url, authToken, options = {}) {
  const c = createClient({ url, authToken, ...options });
  clients.push(c);
  return c;
}
after(() => {
  for (const c of clients) c.close();
});

/** A new database with a full-access client on it (integers as bigint). */
async function freshDb(options = {}) {
  const db = await newDatabase();
  const token = await dbToken(db.name);
  return { ...db, token, db: client(db.url, token, { intMode: 'bigint', ...options }) };
}

/**
 * Asserts that `promise` rejects with a LibsqlError with the given `code`, and returns
 * the error. `message` (a RegExp) is matched against the error message.
 */
async function rejectsLibsql(promise, code, message) {
  let caught;
  await assert.rejects(promise, (err) => {
    caught = err;
    assert.ok(err instanceof LibsqlError, `expected a LibsqlError, got ${err?.stack ?? err}`);
    assert.equal(err.code, code, `expected code ${code}, got ${err.code}: ${err.message}`);
    if (message) assert.match(err.message, message);
    return true;
  });
  return caught;
}

/**
 * The client's shape of an HTTP-level refusal (401, 403, 409…): the server's
 * `{"error": …}` body has no `message` key, so @libsql/hrana-client raises an
 * HttpServerError (kept as `cause`, with the status) and the client maps it to the code
 * SERVER_ERROR.
 */
async function rejectsHttp(promise, status) {
  const err = await rejectsLibsql(promise, 'SERVER_ERROR');
  assert.equal(err.cause?.status, status, `expected HTTP ${status}: ${err.message}`);
  assert.match(err.message, new RegExp(`HTTP status ${status}`));
  return err;
}

async function count(db, table) {
  const rs = await db.execute(`SELECT count(*) AS n FROM ${table}`);
  return Number(rs.rows[0].n);
}

function bytes(value) {
  assert.ok(value instanceof ArrayBuffer, `expected an ArrayBuffer, got ${value}`);
  return Buffer.from(value);
}

// ---------------------------------------------------------------------------------------
// execute(): values, arguments, result sets

describe('execute', () => {
  test('a query right after the database is created (no wait) succeeds', async () => {
    const db = await newDatabase();
    const token = await dbToken(db.name);
    const c = client(db.url, token);
    await c.execute('CREATE TABLE t (x)');
    await c.execute({ sql: 'INSERT INTO t VALUES (?)', args: ['first'] });
    const rs = await c.execute('SELECT x FROM t');
    assert.deepEqual(rs.rows.map((r) => r.x), ['first']);
  });

  test('an empty result still names its columns and their declared types (HTTP and WebSocket)', async () => {
    // Issue 32: a query without rows answered no columns, so queryRow() without a row and
    // schema introspection lost them.
    const { db, url, token } = await freshDb();
    await db.execute('CREATE TABLE e (a TEXT, b INTEGER, c)');
    for (const c of [db, client(url.replace(/^http/, 'ws'), token)]) {
      const rs = await c.execute('SELECT a, b, c FROM e');
      assert.deepEqual(rs.rows, []);
      assert.deepEqual(rs.columns, ['a', 'b', 'c']);
      assert.deepEqual(rs.columnTypes, ['TEXT', 'INTEGER', '']);
      const none = await c.execute('SELECT 1 AS one WHERE 0 = 1');
      assert.deepEqual(none.columns, ['one']);
      const [batched] = await c.batch(['SELECT a, b, c FROM e'], 'read');
      assert.deepEqual(batched.columns, ['a', 'b', 'c']);
      assert.deepEqual(batched.columnTypes, ['TEXT', 'INTEGER', '']);
    }
  });

  test('every value type round-trips exactly (intMode "bigint")', async () => {
    const { db } = await freshDb();
    await db.execute('CREATE TABLE v (id INTEGER PRIMARY KEY, v)');

    const big = randomBytes(64 * 1024);
    const arrayBuffer = new Uint8Array([9, 8, 7, 0, 255]).buffer;
    // [value sent, value expected back, SQLite typeof()]
    const cases = [
      [null, null, 'null'],
      [0n, 0n, 'integer'],
      [1n, 1n, 'integer'],
      [-1n, -1n, 'integer'],
      [9007199254740993n, 9007199254740993n, 'integer'], // 2^53 + 1: not a double
      [9223372036854775807n, 9223372036854775807n, 'integer'], // i64::MAX
      [-9223372036854775808n, -9223372036854775808n, 'integer'], // i64::MIN
      [true, 1n, 'integer'],
      [false, 0n, 'integer'],
      [3.141592653589793, 3.141592653589793, 'real'],
      [-0.5, -0.5, 'real'],
      [1, 1, 'real'], // a JS number is always sent as a float
      [1e308, 1e308, 'real'],
      [5e-324, 5e-324, 'real'], // the smallest subnormal
      [2 ** 53, 2 ** 53, 'real'],
      ['', '', 'text'],
      ['plain ascii', 'plain ascii', 'text'],
      ['héllo wörld — ünïcödé', 'héllo wörld — ünïcödé', 'text'],
      ['🦀 日本語 עברית ﷽ e\u0301', '🦀 日本語 עברית ﷽ e\u0301', 'text'],
      ['quotes \' " \\ and\nnew\tlines\r\n', 'quotes \' " \\ and\nnew\tlines\r\n', 'text'],
      ['nul \u0000 inside', 'nul \u0000 inside', 'text'],
      [new Uint8Array([0, 1, 2, 253, 254, 255]), Buffer.from([0, 1, 2, 253, 254, 255]), 'blob'],
      [new Uint8Array(0), Buffer.alloc(0), 'blob'],
      [arrayBuffer, Buffer.from([9, 8, 7, 0, 255]), 'blob'],
      [new Uint8Array(big), big, 'blob'],
    ];
    for (const [i, [value]] of cases.entries()) {
      const rs = await db.execute({ sql: 'INSERT INTO v (id, v) VALUES (?, ?)', args: [i, value] });
      assert.equal(rs.rowsAffected, 1);
      assert.equal(rs.lastInsertRowid, BigInt(i));
    }

    const rs = await db.execute('SELECT id, v, typeof(v) AS t FROM v ORDER BY id');
    assert.deepEqual(rs.columns, ['id', 'v', 't']);
    assert.deepEqual(rs.columnTypes, ['INTEGER', '', '']);
    assert.equal(rs.rows.length, cases.length);
    for (const [i, [sent, expected, type]] of cases.entries()) {
      const row = rs.rows[i];
      const label = `case ${i} (${typeof sent} ${String(sent).slice(0, 40)})`;
      assert.equal(row.id, BigInt(i), label);
      assert.equal(row.t, type, `${label}: typeof`);
      if (type === 'blob') {
        assert.ok(bytes(row.v).equals(expected), `${label}: blob bytes`);
      } else if (type === 'real') {
        assert.equal(typeof row.v, 'number', label);
        assert.ok(Object.is(row.v, expected), `${label}: ${row.v} !== ${expected}`);
      } else {
        assert.equal(row.v, expected, label);
      }
      // Rows are also arrays.
      assert.equal(row.length, 3);
      assert.equal(row[0], row.id);
    }

    // Values also come back exactly when they are computed, not stored.
    const computed = await db.execute(
      "SELECT 9223372036854775807 AS i, -1.5e-10 AS f, 'ü' AS s, x'00ff' AS b, NULL AS n",
    );
    const r = computed.rows[0];
    assert.equal(r.i, 9223372036854775807n);
    assert.equal(r.f, -1.5e-10);
    assert.equal(r.s, 'ü');
    assert.ok(bytes(r.b).equals(Buffer.from([0, 255])));
    assert.equal(r.n, null);
  });

  test('intMode "number" and "string" read integers as the client promises', async () => {
    const { url, token } = await freshDb();
    const asNumber = client(url, token); // the default intMode
    const asString = client(url, token, { intMode: 'string' });
    const sql = 'SELECT 42 AS small, 9223372036854775807 AS big';

    const n = await asNumber.execute('SELECT 42 AS small, -7 AS neg');
    assert.equal(n.rows[0].small, 42);
    assert.equal(n.rows[0].neg, -7);
    // A number client refuses integers it cannot represent (client-side RangeError).
    await assert.rejects(asNumber.execute(sql), RangeError);

    const s = await asString.execute(sql);
    assert.equal(s.rows[0].small, '42');
    assert.equal(s.rows[0].big, '9223372036854775807');
  });

  test('positional arguments: ?, ?NNN, repeated', async () => {
    const { db } = await freshDb();
    const rs = await db.execute({ sql: 'SELECT ? AS a, ? AS b, ? AS c', args: [1n, 'two', null] });
    assert.deepEqual(rs.rows[0].a, 1n);
    assert.equal(rs.rows[0].b, 'two');
    assert.equal(rs.rows[0].c, null);

    const numbered = await db.execute({
      sql: 'SELECT ?2 AS second, ?1 AS first, ?2 AS again',
      args: ['x', 'y'],
    });
    assert.deepEqual(
      [numbered.rows[0].second, numbered.rows[0].first, numbered.rows[0].again],
      ['y', 'x', 'y'],
    );

    // The (sql, args) overload.
    const overload = await db.execute('SELECT ? + ? AS sum', [2n, 3n]);
    assert.equal(overload.rows[0].sum, 5n);
  });

  test('named arguments: :name, @name, $name, with or without the prefix in the key', async () => {
    const { db } = await freshDb();
    const sql = 'SELECT :a AS a, @b AS b, $c AS c, :a || @b AS ab';
    const bare = await db.execute({ sql, args: { a: 'A', b: 'B', c: 3n } });
    assert.deepEqual({ ...bare.rows[0] }, { a: 'A', b: 'B', c: 3n, ab: 'AB' });

    const prefixed = await db.execute({ sql, args: { ':a': 'A', '@b': 'B', $c: 3n } });
    assert.deepEqual({ ...prefixed.rows[0] }, { a: 'A', b: 'B', c: 3n, ab: 'AB' });

    await db.execute('CREATE TABLE people (name TEXT, age INTEGER)');
    await db.execute({
      sql: 'INSERT INTO people VALUES (:name, :age)',
      args: { name: 'Zoë', age: 41n },
    });
    const who = await db.execute({
      sql: 'SELECT name FROM people WHERE age = $age',
      args: { age: 41n },
    });
    assert.deepEqual(who.rows.map((r) => r.name), ['Zoë']);
  });

  test('rowsAffected, lastInsertRowid, column names and declared types', async () => {
    const { db } = await freshDb();
    const created = await db.execute(
      'CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, data BLOB)',
    );
    assert.equal(created.rowsAffected, 0);
    assert.deepEqual(created.rows, []);

    const ins = await db.execute(
      "INSERT INTO items (name, price) VALUES ('a', 1.5), ('b', 2.5), ('c', 3.5)",
    );
    assert.equal(ins.rowsAffected, 3);
    assert.equal(ins.lastInsertRowid, 3n);

    const upd = await db.execute('UPDATE items SET price = price * 2 WHERE id >= 2');
    assert.equal(upd.rowsAffected, 2);

    const returning = await db.execute(
      "INSERT INTO items (name) VALUES ('d') RETURNING id, name",
    );
    assert.deepEqual(returning.columns, ['id', 'name']);
    assert.deepEqual(returning.rows.map((r) => [r.id, r.name]), [[4n, 'd']]);
    assert.equal(returning.lastInsertRowid, 4n);

    const sel = await db.execute('SELECT id, name, price, data, price * 2 AS doubled FROM items ORDER BY id');
    assert.deepEqual(sel.columns, ['id', 'name', 'price', 'data', 'doubled']);
    assert.deepEqual(sel.columnTypes, ['INTEGER', 'TEXT', 'REAL', 'BLOB', '']);
    assert.deepEqual(sel.rows.map((r) => r.price), [1.5, 5, 7, null]);

    const del = await db.execute('DELETE FROM items');
    assert.equal(del.rowsAffected, 4);
  });

  test('a large result set arrives whole', async () => {
    const { db } = await freshDb();
    const rs = await db.execute(`
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
      SELECT i, printf('row %05d', i) AS label FROM n`);
    assert.equal(rs.rows.length, 5000);
    assert.equal(rs.rows[4999].i, 5000n);
    assert.equal(rs.rows[4999].label, 'row 05000');
  });

  test('concurrent writes from many requests all land', async () => {
    const { db } = await freshDb();
    await db.execute('CREATE TABLE c (i INTEGER)');
    await Promise.all(
      Array.from({ length: 25 }, (_, i) =>
        db.execute({ sql: 'INSERT INTO c VALUES (?)', args: [BigInt(i)] }),
      ),
    );
    assert.equal(await count(db, 'c'), 25);
  });

  test('a libsql: URL with ?tls=0 reaches the same database', async () => {
    const { url, token, db } = await freshDb();
    await db.execute('CREATE TABLE t (x)');
    await db.execute("INSERT INTO t VALUES ('hi')");
    const viaLibsql = client(`${url.replace(/^http:/, 'libsql:')}?tls=0`, token);
    const rs = await viaLibsql.execute('SELECT x FROM t');
    assert.deepEqual(rs.rows.map((r) => r.x), ['hi']);
  });
});

// ---------------------------------------------------------------------------------------
// batch()

describe('batch', () => {
  test('"write" mode runs every statement in one transaction, in order', async () => {
    const { db } = await freshDb();
    const results = await db.batch(
      [
        'CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT)',
        { sql: 'INSERT INTO t (x) VALUES (?)', args: ['one'] },
        { sql: 'INSERT INTO t (x) VALUES (?)', args: ['two'] },
        { sql: 'INSERT INTO t (x) VALUES (:x)', args: { x: 'three' } },
        'SELECT x FROM t ORDER BY id',
      ],
      'write',
    );
    assert.equal(results.length, 5);
    assert.deepEqual(results.map((r) => r.rowsAffected), [0, 1, 1, 1, 0]);
    assert.equal(results[3].lastInsertRowid, 3n);
    assert.deepEqual(results[4].rows.map((r) => r.x), ['one', 'two', 'three']);
    assert.equal(await count(db, 't'), 3);
  });

  test('"read" mode answers queries', async () => {
    const { db } = await freshDb();
    await db.batch(
      ['CREATE TABLE t (x)', "INSERT INTO t VALUES ('a'), ('b')"],
      'write',
    );
    const results = await db.batch(
      ['SELECT count(*) AS n FROM t', 'SELECT x FROM t ORDER BY x', 'SELECT 1 + 1 AS two'],
      'read',
    );
    assert.equal(results.length, 3);
    assert.equal(results[0].rows[0].n, 2n);
    assert.deepEqual(results[1].rows.map((r) => r.x), ['a', 'b']);
    assert.equal(results[2].rows[0].two, 2n);
  });

  test('"deferred" mode (and the default mode) read and write', async () => {
    const { db } = await freshDb();
    const deferred = await db.batch(
      ['CREATE TABLE t (x)', "INSERT INTO t VALUES ('d')", 'SELECT x FROM t'],
      'deferred',
    );
    assert.deepEqual(deferred[2].rows.map((r) => r.x), ['d']);

    const byDefault = await db.batch([
      "INSERT INTO t VALUES ('e')",
      'SELECT x FROM t ORDER BY x',
    ]);
    assert.deepEqual(byDefault[1].rows.map((r) => r.x), ['d', 'e']);
  });

  test('a failing batch rolls back all of it and reports the failing statement', async () => {
    const { db } = await freshDb();
    await db.execute('CREATE TABLE t (x UNIQUE)');
    await db.execute("INSERT INTO t VALUES ('before')");

    for (const mode of ['write', 'deferred']) {
      const err = await rejectsLibsql(
        db.batch(
          [
            "INSERT INTO t VALUES ('one')",
            'CREATE TABLE side (y)',
            "INSERT INTO t VALUES ('two')",
            "INSERT INTO t VALUES ('one')", // UNIQUE violation
            "INSERT INTO t VALUES ('never')",
          ],
          mode,
        ),
        'SQLITE_CONSTRAINT',
        /UNIQUE constraint failed: t\.x/,
      );
      assert.ok(err instanceof LibsqlBatchError, `${mode}: a LibsqlBatchError`);
      assert.equal(err.statementIndex, 3, `${mode}: the failing statement's index`);

      const rows = await db.execute('SELECT x FROM t ORDER BY x');
      assert.deepEqual(rows.rows.map((r) => r.x), ['before'], `${mode}: nothing was kept`);
      const side = await db.execute(
        "SELECT count(*) AS n FROM sqlite_schema WHERE name = 'side'",
      );
      assert.equal(side.rows[0].n, 0n, `${mode}: the CREATE TABLE was rolled back too`);
    }
    // The database is not left inside a transaction: later writes work and persist.
    await db.execute("INSERT INTO t VALUES ('after')");
    assert.equal(await count(db, 't'), 2);
  });

  test('statements of 5000 characters or more are sent inline, not stored', async () => {
    const { db } = await freshDb();
    const long = `SELECT '${'x'.repeat(6000)}' AS long, ? AS arg`;
    const [stored, inline] = await db.batch(
      ['CREATE TABLE t (x)', { sql: long, args: ['inline'] }],
      'write',
    );
    assert.equal(stored.rowsAffected, 0);
    assert.equal(inline.rows[0].long.length, 6000);
    assert.equal(inline.rows[0].arg, 'inline');
  });

  test('migrate() rebuilds a referenced table (foreign keys off, one transaction)', async () => {
    const { db } = await freshDb();
    await db.batch(
      [
        'CREATE TABLE parent (id INTEGER PRIMARY KEY)',
        'CREATE TABLE child (parent_id INTEGER REFERENCES parent (id))',
        'INSERT INTO parent VALUES (1), (2)',
        'INSERT INTO child VALUES (1), (2)',
      ],
      'write',
    );
    // Dropping `parent` while `child` rows point at it fails with foreign keys on; the
    // client's migrate() turns them off around the batch.
    const results = await db.migrate([
      'CREATE TABLE parent_new (id INTEGER PRIMARY KEY, name TEXT)',
      'INSERT INTO parent_new (id) SELECT id FROM parent',
      'DROP TABLE parent',
      'ALTER TABLE parent_new RENAME TO parent',
    ]);
    assert.equal(results.length, 4);
    assert.equal(results[1].rowsAffected, 2);
    const cols = await db.execute("SELECT name FROM pragma_table_info('parent') ORDER BY cid");
    assert.deepEqual(cols.rows.map((r) => r.name), ['id', 'name']);
    const joined = await db.execute(
      'SELECT count(*) AS n FROM child JOIN parent ON parent.id = child.parent_id',
    );
    assert.equal(joined.rows[0].n, 2n);
  });

  test('an SQL error in a batch surfaces its code', async () => {
    const { db } = await freshDb();
    const err = await rejectsLibsql(
      db.batch(['SELECT 1', 'SELECT nope FROM sqlite_schema'], 'read'),
      'SQL_INPUT_ERROR',
      /no such column: nope/,
    );
    assert.equal(err.statementIndex, 1);
  });

  test('a missing table is SQL_INPUT_ERROR', async () => {
    const { db } = await freshDb();
    await rejectsLibsql(
      db.execute('SELECT * FROM nowhere'),
      'SQL_INPUT_ERROR',
      /no such table: nowhere/,
    );
  });
});

// ---------------------------------------------------------------------------------------
// transaction()

describe('transaction', () => {
  test('commit: several statements over several requests, invisible to others until commit', async () => {
    const { db, url, token } = await freshDb();
    const other = client(url, token, { intMode: 'bigint' });
    await db.execute('CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT)');

    const tx = await db.transaction('write');
    try {
      const first = await tx.execute({ sql: 'INSERT INTO t (x) VALUES (?)', args: ['a'] });
      assert.equal(first.rowsAffected, 1);
      assert.equal(first.lastInsertRowid, 1n);
      await tx.execute({ sql: 'INSERT INTO t (x) VALUES (:x)', args: { x: 'b' } });
      const batch = await tx.batch([
        "INSERT INTO t (x) VALUES ('c')",
        "UPDATE t SET x = upper(x) WHERE x = 'a'",
        'SELECT x FROM t ORDER BY id',
      ]);
      assert.deepEqual(batch[2].rows.map((r) => r.x), ['A', 'b', 'c']);

      // Inside the transaction its own writes are visible…
      const inside = await tx.execute('SELECT count(*) AS n FROM t');
      assert.equal(inside.rows[0].n, 3n);
      // …and another connection still sees the last committed state.
      assert.equal(await count(other, 't'), 0);

      await tx.commit();
    } finally {
      tx.close();
    }
    assert.equal(tx.closed, true);
    const after = await other.execute('SELECT x FROM t ORDER BY id');
    assert.deepEqual(after.rows.map((r) => r.x), ['A', 'b', 'c']);
  });

  test('rollback: nothing of the transaction remains', async () => {
    const { db } = await freshDb();
    await db.execute('CREATE TABLE t (x)');
    await db.execute("INSERT INTO t VALUES ('kept')");

    const tx = await db.transaction('write');
    try {
      await tx.execute("INSERT INTO t VALUES ('gone 1')");
      await tx.execute("INSERT INTO t VALUES ('gone 2')");
      await tx.execute('CREATE TABLE side (y)');
      await tx.execute("DELETE FROM t WHERE x = 'kept'");
      assert.equal((await tx.execute('SELECT count(*) AS n FROM t')).rows[0].n, 2n);
      await tx.rollback();
    } finally {
      tx.close();
    }
    const rows = await db.execute('SELECT x FROM t');
    assert.deepEqual(rows.rows.map((r) => r.x), ['kept']);
    const side = await db.execute("SELECT count(*) AS n FROM sqlite_schema WHERE name = 'side'");
    assert.equal(side.rows[0].n, 0n);
  });

  test('a statement error inside a transaction leaves it open and usable', async () => {
    const { db } = await freshDb();
    await db.execute('CREATE TABLE t (x UNIQUE)');

    const tx = await db.transaction('write');
    try {
      await tx.execute("INSERT INTO t VALUES ('a')");
      await rejectsLibsql(
        tx.execute("INSERT INTO t VALUES ('a')"),
        'SQLITE_CONSTRAINT',
        /UNIQUE constraint failed/,
      );
      await tx.execute("INSERT INTO t VALUES ('b')");
      await tx.commit();
    } finally {
      tx.close();
    }
    const rows = await db.execute('SELECT x FROM t ORDER BY x');
    assert.deepEqual(rows.rows.map((r) => r.x), ['a', 'b']);
  });

  test('another writer waits for an open write transaction instead of failing', async () => {
    const { db } = await freshDb();
    await db.execute('CREATE TABLE t (x)');

    const tx = await db.transaction('write');
    let committedAt;
    try {
      await tx.execute("INSERT INTO t VALUES ('tx')");
      const waiting = db.execute("INSERT INTO t VALUES ('plain')").then(() => Date.now());
      // Commit well within the server's transaction timeout (5 s in sqld).
      await new Promise((resolve) => setTimeout(resolve, 700));
      committedAt = Date.now();
      await tx.commit();
      const landedAt = await waiting;
      assert.ok(landedAt >= committedAt, 'the other write landed only after the commit');
    } finally {
      tx.close();
    }
    const rows = await db.execute('SELECT x FROM t ORDER BY rowid');
    assert.deepEqual(rows.rows.map((r) => r.x), ['tx', 'plain']);
  });

  test('close() without commit discards the transaction and frees the write lock', async () => {
    const { db } = await freshDb();
    await db.execute('CREATE TABLE t (x)');
    const tx = await db.transaction('write');
    await tx.execute("INSERT INTO t VALUES ('discarded')");
    tx.close();
    assert.equal(tx.closed, true);
    // A new write goes through at once (it would wait if the lock were still held).
    const started = Date.now();
    await db.execute("INSERT INTO t VALUES ('kept')");
    assert.ok(Date.now() - started < 3000, 'the write was not held up');
    const rows = await db.execute('SELECT x FROM t');
    assert.deepEqual(rows.rows.map((r) => r.x), ['kept']);
  });

  test('many distinct statements in one transaction (the client evicts stored SQL)', async () => {
    const { db } = await freshDb();
    await db.execute('CREATE TABLE t (i INTEGER, label TEXT)');
    const tx = await db.transaction('write');
    try {
      // The client keeps 30 statements stored on the server per transaction, then sends
      // close_sql for the oldest; 45 distinct texts go through that several times.
      for (let i = 0; i < 45; i += 1) {
        await tx.execute({ sql: `INSERT INTO t VALUES (?, 'label ${i}')`, args: [BigInt(i)] });
      }
      const again = await tx.batch([
        { sql: "INSERT INTO t VALUES (?, 'label 0')", args: [100n] },
        'SELECT count(*) AS n FROM t',
      ]);
      assert.equal(again[1].rows[0].n, 46n);
      await tx.commit();
    } finally {
      tx.close();
    }
    assert.equal(await count(db, 't'), 46);
  });

  test('"read" and "deferred" transactions', async () => {
    const { db } = await freshDb();
    await db.execute('CREATE TABLE t (x)');
    await db.execute("INSERT INTO t VALUES (1), (2)");

    const read = await db.transaction('read');
    try {
      const a = await read.execute('SELECT count(*) AS n FROM t');
      const b = await read.execute('SELECT sum(x) AS s FROM t');
      assert.equal(a.rows[0].n, 2n);
      assert.equal(b.rows[0].s, 3n);
      await read.commit();
    } finally {
      read.close();
    }

    const deferred = await db.transaction('deferred');
    try {
      await deferred.execute('INSERT INTO t VALUES (3)');
      await deferred.commit();
    } finally {
      deferred.close();
    }
    assert.equal(await count(db, 't'), 3);
  });

  test('executeMultiple() inside a transaction, then commit', async () => {
    const { db } = await freshDb();
    const tx = await db.transaction('write');
    try {
      await tx.executeMultiple(`
        CREATE TABLE t (x);
        INSERT INTO t VALUES ('m1');
        INSERT INTO t VALUES ('m2');
      `);
      await tx.execute("INSERT INTO t VALUES ('m3')");
      await tx.commit();
    } finally {
      tx.close();
    }
    const rows = await db.execute('SELECT x FROM t ORDER BY x');
    assert.deepEqual(rows.rows.map((r) => r.x), ['m1', 'm2', 'm3']);
  });
});

// ---------------------------------------------------------------------------------------
// executeMultiple()

describe('executeMultiple', () => {
  test('runs a script of several statements', async () => {
    const { db } = await freshDb();
    await db.executeMultiple(`
      -- a comment
      CREATE TABLE a (x);
      CREATE TABLE b (y);
      INSERT INTO a VALUES (1), (2), ('três');
      INSERT INTO b SELECT x FROM a WHERE typeof(x) = 'integer';
      /* another comment */
    `);
    assert.equal(await count(db, 'a'), 3);
    assert.equal(await count(db, 'b'), 2);
  });

  test('stops at the first error: earlier statements stay, later ones do not run', async () => {
    const { db } = await freshDb();
    await rejectsLibsql(
      db.executeMultiple(`
        CREATE TABLE t (x UNIQUE);
        INSERT INTO t VALUES (1);
        INSERT INTO t VALUES (1);
        INSERT INTO t VALUES (2);
      `),
      'SQLITE_CONSTRAINT',
      /UNIQUE constraint failed: t\.x/,
    );
    const rows = await db.execute('SELECT x FROM t');
    assert.deepEqual(rows.rows.map((r) => r.x), [1n]);
  });

  test('an explicit BEGIN … COMMIT script', async () => {
    const { db } = await freshDb();
    await db.executeMultiple(`
      BEGIN;
      CREATE TABLE t (x);
      INSERT INTO t VALUES ('in a transaction');
      COMMIT;
    `);
    assert.equal(await count(db, 't'), 1);
  });
});

// ---------------------------------------------------------------------------------------
// Errors

describe('errors', () => {
  test('a UNIQUE constraint violation surfaces as SQLITE_CONSTRAINT', async () => {
    const { db } = await freshDb();
    await db.execute('CREATE TABLE t (x UNIQUE, y NOT NULL DEFAULT 0)');
    await db.execute('INSERT INTO t (x) VALUES (1)');
    const err = await rejectsLibsql(
      db.execute('INSERT INTO t (x) VALUES (1)'),
      'SQLITE_CONSTRAINT',
      /^SQLITE_CONSTRAINT: SQLite error: UNIQUE constraint failed: t\.x$/,
    );
    // Hrana over HTTP carries only the primary code: the client fills neither the
    // extended code nor the numeric one (it would say SQLITE_CONSTRAINT_UNIQUE / 2067).
    assert.ok([undefined, 'SQLITE_CONSTRAINT_UNIQUE'].includes(err.extendedCode), String(err.extendedCode));
    assert.ok([undefined, 2067].includes(err.rawCode), String(err.rawCode));
    // The server's error is kept as the cause, with the same code.
    assert.equal(err.cause?.code, 'SQLITE_CONSTRAINT');

    await rejectsLibsql(
      db.execute('INSERT INTO t (x, y) VALUES (2, NULL)'),
      'SQLITE_CONSTRAINT',
      /NOT NULL constraint failed: t\.y/,
    );
    // The failed statements changed nothing.
    assert.equal(await count(db, 't'), 1);
  });

  test('SQL errors: unknown column, syntax, several statements in execute()', async () => {
    const { db } = await freshDb();
    await rejectsLibsql(
      db.execute('SELECT nope FROM sqlite_schema'),
      'SQL_INPUT_ERROR',
      /no such column: nope/,
    );
    // sqld answers SQL_PARSE_ERROR for text its own parser rejects; SQLite's own error
    // (with an offset) is SQL_INPUT_ERROR. Either is what clients see from libSQL servers.
    await assert.rejects(db.execute('SELEC 1'), (err) => {
      assert.ok(err instanceof LibsqlError);
      assert.ok(['SQL_PARSE_ERROR', 'SQL_INPUT_ERROR'].includes(err.code), err.message);
      return true;
    });
    await rejectsLibsql(db.execute('SELECT 1; SELECT 2'), 'SQL_MANY_STATEMENTS');
  });
});

// ---------------------------------------------------------------------------------------
// Tokens and access

describe('tokens', () => {
  test('a read-only token reads but its writes are refused (403)', async () => {
    const { name, url, db } = await freshDb();
    await db.execute('CREATE TABLE t (x)');
    await db.execute("INSERT INTO t VALUES ('seed')");

    const ro = client(url, await dbToken(name, 'read-only'), { intMode: 'bigint' });
    const rows = await ro.execute('SELECT x FROM t');
    assert.deepEqual(rows.rows.map((r) => r.x), ['seed']);
    const read = await ro.batch(['SELECT count(*) AS n FROM t', 'SELECT 1 AS one'], 'read');
    assert.equal(read[0].rows[0].n, 1n);

    await rejectsHttp(ro.execute("INSERT INTO t VALUES ('no')"), 403);
    await rejectsHttp(ro.execute('CREATE TABLE u (y)'), 403);
    await rejectsHttp(ro.execute('DROP TABLE t'), 403);
    await rejectsHttp(ro.batch(["INSERT INTO t VALUES ('no')"], 'write'), 403);
    await rejectsHttp(ro.executeMultiple("INSERT INTO t VALUES ('no');"), 403);

    assert.equal(await count(db, 't'), 1, 'nothing was written');
  });

  test('a token of another database, or no token, is refused (401)', async () => {
    const a = await freshDb();
    const b = await freshDb();
    await rejectsHttp(client(a.url, b.token).execute('SELECT 1'), 401);
    await rejectsHttp(client(a.url, undefined).execute('SELECT 1'), 401);
    await rejectsHttp(client(a.url, 'not-a-jwt').execute('SELECT 1'), 401);
  });

  test('a group token opens every database of the group, read-only when asked', async () => {
    const a = await freshDb();
    const b = await freshDb();
    await a.db.execute('CREATE TABLE t (x)');
    await b.db.execute('CREATE TABLE t (x)');

    const mint = async (authorization) =>
      (
        await apiOk(
          'POST',
          `/groups/default/auth/tokens?expiration=1h&authorization=${authorization}`,
        )
      ).jwt;
    const full = await mint('full-access');
    const readOnly = await mint('read-only');
    for (const { url } of [a, b]) {
      await client(url, full).execute("INSERT INTO t VALUES ('via the group token')");
      const ro = client(url, readOnly);
      assert.equal(await count(ro, 't'), 1);
      await rejectsHttp(ro.execute("INSERT INTO t VALUES ('no')"), 403);
    }
  });

  test('after rotating the keys, old tokens are refused and new ones work', async () => {
    const { name, url, db } = await freshDb();
    await db.execute('CREATE TABLE t (x)');
    const oldReadOnly = client(url, await dbToken(name, 'read-only'));
    await oldReadOnly.execute('SELECT * FROM t');

    await apiOk('POST', `/databases/${name}/auth/rotate`);

    await rejectsHttp(db.execute('SELECT * FROM t'), 401);
    await rejectsHttp(oldReadOnly.execute('SELECT * FROM t'), 401);

    const fresh = client(url, await dbToken(name));
    await fresh.execute("INSERT INTO t VALUES ('after rotation')");
    assert.equal(await count(fresh, 't'), 1);
  });
});

// ---------------------------------------------------------------------------------------
// Database configuration enforced on the data plane

describe('configuration', () => {
  test('block_writes: writes fail with BLOCKED, reads go on; unblocking restores writes', async () => {
    const { name, db } = await freshDb();
    await db.execute('CREATE TABLE t (x)');
    await db.execute("INSERT INTO t VALUES ('before')");

    await configure(name, { block_writes: true });
    await rejectsLibsql(db.execute("INSERT INTO t VALUES ('blocked')"), 'BLOCKED');
    await rejectsLibsql(db.execute('CREATE TABLE u (y)'), 'BLOCKED');
    const err = await rejectsLibsql(
      db.batch(['SELECT 1', "INSERT INTO t VALUES ('blocked')"], 'write'),
      'BLOCKED',
    );
    assert.equal(err.statementIndex, 1);
    assert.equal(await count(db, 't'), 1, 'reads still work');

    await configure(name, { block_writes: false });
    await db.execute("INSERT INTO t VALUES ('after')");
    assert.equal(await count(db, 't'), 2);
  });

  test('block_reads: queries fail with BLOCKED; unblocking restores them', async () => {
    const { name, db } = await freshDb();
    await db.execute('CREATE TABLE t (x)');

    await configure(name, { block_reads: true });
    await rejectsLibsql(db.execute('SELECT * FROM t'), 'BLOCKED');
    await rejectsLibsql(db.execute("INSERT INTO t VALUES ('x')"), 'BLOCKED');

    await configure(name, { block_reads: false });
    assert.equal(await count(db, 't'), 0);
  });

  test('size_limit: growing past it fails with SQLITE_FULL; lifting it lets writes in', async () => {
    const { name, db } = await freshDb();
    await db.execute('CREATE TABLE t (b BLOB)');
    await db.execute("INSERT INTO t VALUES (x'00')");

    await configure(name, { size_limit: '64kb' });
    await rejectsLibsql(
      db.execute('INSERT INTO t VALUES (zeroblob(200000))'),
      'SQLITE_FULL',
      /full/i,
    );
    await rejectsLibsql(
      db.batch(['INSERT INTO t VALUES (zeroblob(100000))'], 'write'),
      'SQLITE_FULL',
    );
    // The client cannot lift the limit itself.
    await db.execute('PRAGMA max_page_count = 1000000').catch(() => {});
    await rejectsLibsql(db.execute('INSERT INTO t VALUES (zeroblob(200000))'), 'SQLITE_FULL');
    assert.equal(await count(db, 't'), 1, 'the failed inserts left nothing behind');

    await configure(name, { size_limit: '' });
    await db.execute('INSERT INTO t VALUES (zeroblob(200000))');
    assert.equal(await count(db, 't'), 2);
  });

  test('ATTACH of another database needs allow_attach on it and read_attach in the token', async () => {
    const target = await freshDb();
    await target.db.execute('CREATE TABLE src (x)');
    await target.db.execute("INSERT INTO src VALUES ('from the other database')");
    const main = await newDatabase();

    // HTTP streams end with each request, so ATTACH and its use share one script.
    const script = `
      ATTACH DATABASE '${target.name}' AS other;
      CREATE TABLE copied AS SELECT x FROM other.src;
      DETACH DATABASE other;`;

    const permitted = client(
      main.url,
      await dbToken(main.name, 'full-access', {
        permissions: { read_attach: { databases: [target.name] } },
      }),
    );
    // The target does not allow attach yet.
    await rejectsHttp(permitted.executeMultiple(script), 403);

    await configure(target.name, { allow_attach: true });
    const plain = client(main.url, await dbToken(main.name));
    await rejectsHttp(plain.executeMultiple(script), 403);

    await permitted.executeMultiple(script);
    const rows = await permitted.execute('SELECT x FROM copied');
    assert.deepEqual(rows.rows.map((r) => r.x), ['from the other database']);
  });
});

// ---------------------------------------------------------------------------------------
// Upload

/** Builds a local SQLite file (WAL, 4096-byte pages, checkpointed) and returns its bytes. */
async function buildSqliteFile(statements) {
  const dir = await mkdtemp(join(tmpdir(), 'atoll-upload-'));
  const path = join(dir, 'upload.db');
  try {
    const local = createClient({ url: pathToFileURL(path).href, intMode: 'bigint' });
    try {
      await local.execute('PRAGMA page_size = 4096');
      const mode = await local.execute('PRAGMA journal_mode = WAL');
      assert.equal(mode.rows[0][0], 'wal');
      for (const stmt of statements) await local.execute(stmt);
      await local.execute('PRAGMA wal_checkpoint(TRUNCATE)');
    } finally {
      local.close();
    }
    const file = await readFile(path);
    assert.equal(file.subarray(0, 16).toString('latin1'), 'SQLite format 3\0');
    assert.equal(file.readUInt16BE(16), 4096, 'page size');
    assert.deepEqual([file[18], file[19]], [2, 2], 'WAL mode in the header');
    return file;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('upload', () => {
  test('a database created for upload refuses queries until the file lands, then serves it', async () => {
    const blob = randomBytes(3000);
    const file = await buildSqliteFile([
      'CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, big INTEGER, data BLOB, price REAL)',
      'CREATE INDEX items_name ON items (name)',
      {
        sql: 'INSERT INTO items (name, big, data, price) VALUES (?, ?, ?, ?)',
        args: ['Ünïcødé 🦀', 9223372036854775807n, blob, 2.25],
      },
      "INSERT INTO items (name, big, data, price) VALUES ('second', -1, NULL, NULL)",
    ]);

    const db = await newDatabase({ seed: { type: 'database_upload' } });
    const token = await dbToken(db.name);
    const c = client(db.url, token, { intMode: 'bigint' });

    // Before the upload: refused at the HTTP level (Atoll answers 409 "awaiting upload").
    const early = await rejectsLibsql(c.execute('SELECT 1'), 'SERVER_ERROR');
    assert.ok(early.cause?.status >= 400, `an HTTP error, got ${early.cause?.status}`);

    const res = await fetch(new URL('v1/upload', db.url), {
      method: 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        'content-type': 'application/octet-stream',
      },
      body: file,
    });
    const answer = await res.text();
    assert.equal(res.status, 200, `upload answered ${res.status}: ${answer}`);

    const rs = await c.execute('SELECT id, name, big, data, price FROM items ORDER BY id');
    assert.equal(rs.rows.length, 2);
    const [first, second] = rs.rows;
    assert.equal(first.name, 'Ünïcødé 🦀');
    assert.equal(first.big, 9223372036854775807n);
    assert.ok(bytes(first.data).equals(blob));
    assert.equal(first.price, 2.25);
    assert.equal(second.name, 'second');
    assert.equal(second.big, -1n);
    assert.equal(second.data, null);

    const index = await c.execute(
      "SELECT name FROM sqlite_schema WHERE type = 'index' AND name = 'items_name'",
    );
    assert.equal(index.rows.length, 1);

    // The uploaded database is an ordinary, writable database now.
    await c.execute("INSERT INTO items (name) VALUES ('third')");
    assert.equal(await count(c, 'items'), 3);
  });
});
