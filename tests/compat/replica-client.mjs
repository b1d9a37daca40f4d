// The official libSQL client for Node, @libsql/client, unmodified, against the node of a
// replica (not a `*.test.mjs`: `crates/atoll/tests/replicas.rs` runs it inside its
// topology of processes, with REPLICA_URL pointing at the replica's node).
//
// Each `execute()` of the HTTP client is one pipeline that closes its stream: reads are
// answered by the replica, writes go to the primary, and the client reads its own writes.
// Prints one JSON line: what it saw.
//
// Environment: REPLICA_URL (http://…/db/<label>/, the `http_url` form), TOKEN (a database token).

import assert from 'node:assert/strict';
import { createClient } from '@libsql/client';

const url = process.env.REPLICA_URL;
const authToken = process.env.TOKEN;
if (!url || !authToken) {
  throw new Error('REPLICA_URL and TOKEN must be set');
}
const client = createClient({ url, authToken });
const count = async () => Number((await client.execute('SELECT count(*) AS n FROM t')).rows[0].n);

// An empty result still names its columns and their types (issue 32), read on the replica.
const empty = await client.execute('SELECT id, v FROM t WHERE id < 0');
assert.deepEqual(empty.rows, []);
assert.deepEqual(empty.columns, ['id', 'v']);
assert.deepEqual(empty.columnTypes, ['INTEGER', 'TEXT']);

const before = await count();
for (let i = 0; i < 10; i += 1) {
  const inserted = await client.execute({
    sql: 'INSERT INTO t (id, v) VALUES (?, ?)',
    args: [7000 + i, '@libsql/client via the replica'],
  });
  assert.equal(inserted.rowsAffected, 1);
  // Read your writes: the replica answers only once it applied the write.
  assert.equal(await count(), before + i + 1, `write ${i} not visible through the replica`);
}
const batch = await client.batch(
  ['SELECT count(*) AS n FROM t', 'SELECT max(id) AS m FROM t'],
  'read',
);
assert.equal(Number(batch[0].rows[0].n), before + 10);
await client.execute('DELETE FROM t WHERE id >= 7000 AND id < 7010');
assert.equal(await count(), before);
client.close();
console.log(JSON.stringify({ before, written: 10, after: before }));
