// The official Turso Sync client, @tursodatabase/sync, unmodified, against the node of a
// replica (not a `*.test.mjs`: `crates/atoll/tests/replicas.rs` runs it inside its
// topology of processes, with REPLICA_URL pointing at the replica's node).
//
// Its bootstrap and pulls are answered by the replica (docs/DATA-PLANE.md, "Turso Sync");
// its push goes to the primary. Prints one JSON line: what it saw.
//
// Environment: REPLICA_URL (http://…/db/<label>/), TOKEN (a database token), ROWS (the rows
// of table t the database holds).

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@tursodatabase/sync';

const url = (process.env.REPLICA_URL ?? '').replace(/\/+$/, '');
const authToken = process.env.TOKEN;
const rows = Number(process.env.ROWS);
if (!url || !authToken || !rows) {
  throw new Error('REPLICA_URL, TOKEN and ROWS must be set');
}
const dir = await mkdtemp(join(tmpdir(), 'atoll-replica-sync-'));
const client = await connect({ path: join(dir, 'local.db'), url, authToken });
const count = async () =>
  Number((await (await client.prepare('SELECT count(*) AS n FROM t')).all())[0].n);
assert.equal(await count(), rows, 'bootstrap from the replica');
assert.equal(await client.pull(), false, 'nothing newer');
await client.exec("INSERT INTO t (id, v) VALUES (8000, '@tursodatabase/sync via the replica')");
await client.push();
assert.equal(await count(), rows + 1);
await client.close();
await rm(dir, { recursive: true, force: true });
console.log(JSON.stringify({ bootstrapped: rows, pushed: 1 }));
