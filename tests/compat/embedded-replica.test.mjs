// Embedded replicas with the official libSQL client for Node, @libsql/client, unmodified:
// `createClient({ url: 'file:…', syncUrl, authToken })` keeps a local SQLite file and
// `sync()` brings it up to date from Atoll (through the `libsql` native package, which
// embeds the Rust `libsql` crate; docs/DATA-PLANE.md "Embedded replicas").
//
// Environment (set by scripts/compat.sh): ATOLL_URL, ATOLL_TOKEN (see
// libsql-client.test.mjs).

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from '@libsql/client';

const URL_BASE = (process.env.ATOLL_URL ?? '').replace(/\/+$/, '');
const ADMIN_TOKEN = process.env.ATOLL_TOKEN ?? '';
if (!URL_BASE || !ADMIN_TOKEN) {
  throw new Error('ATOLL_URL and ATOLL_TOKEN must be set: run the suite with scripts/compat.sh');
}
const ORG = 'admin';
const RUN = randomBytes(3).toString('hex');

async function apiOk(method, path, body) {
  const headers = { authorization: `Bearer ${ADMIN_TOKEN}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${URL_BASE}/v1/organizations/${ORG}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  assert.equal(res.status, 200, `${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

const created = [];
const dirs = [];
after(async () => {
  for (const name of created) await apiOk('DELETE', `/databases/${name}`);
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

async function newDatabase(name) {
  await apiOk('POST', '/databases', { name, group: 'default' });
  created.push(name);
  const { database } = await apiOk('GET', `/databases/${name}`);
  const { jwt } = await apiOk('POST', `/databases/${name}/auth/tokens?expiration=1h`);
  const readOnly = await apiOk(
    'POST',
    `/databases/${name}/auth/tokens?expiration=1h&authorization=read-only`,
  );
  // http_url ends with '/' (the Hrana client resolves `v2/pipeline` under it); the sync
  // URL goes without it (the replica appends `/info`, `/sync/…`).
  return {
    url: database.http_url,
    syncUrl: database.http_url.replace(/\/+$/, ''),
    token: jwt,
    readOnly: readOnly.jwt,
  };
}

async function localDir() {
  const dir = await mkdtemp(join(tmpdir(), 'atoll-replica-'));
  dirs.push(dir);
  return dir;
}

async function count(client, table) {
  const rs = await client.execute(`SELECT count(*) AS n FROM ${table}`);
  return Number(rs.rows[0].n);
}

test('an embedded replica syncs, syncs incrementally, and reads its own writes', async () => {
  const db = await newDatabase(`er-${RUN}-1`);
  const remote = createClient({ url: db.url, authToken: db.token });
  await remote.batch([
    'CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)',
    "INSERT INTO notes (body) VALUES ('one'), ('two')",
  ]);

  const dir = await localDir();
  const replica = createClient({
    url: `file:${join(dir, 'notes.db')}`,
    syncUrl: db.syncUrl,
    authToken: db.token,
  });
  await replica.sync();
  assert.equal(await count(replica, 'notes'), 2);

  await remote.execute("INSERT INTO notes (body) VALUES ('three')");
  await replica.sync();
  assert.equal(await count(replica, 'notes'), 3);

  // Writes through the replica go to the server; the next sync brings them back.
  await replica.execute("INSERT INTO notes (body) VALUES ('from-the-replica')");
  await replica.sync();
  assert.equal(await count(replica, 'notes'), 4);
  const rs = await remote.execute("SELECT count(*) AS n FROM notes WHERE body = 'from-the-replica'");
  assert.equal(Number(rs.rows[0].n), 1);
  replica.close();
  remote.close();
});

test('an embedded replica takes the client URL, trailing slash and all, as its sync URL', async () => {
  // Issue 32: the replica appends `/info` to the URL it is given; with the URL the CLI
  // prints that is `…//info`, which the server answered 404.
  const db = await newDatabase(`er-${RUN}-slash`);
  const remote = createClient({ url: db.url, authToken: db.token });
  await remote.batch(['CREATE TABLE s (x)', 'INSERT INTO s VALUES (1), (2)']);
  const dir = await localDir();
  assert.ok(db.url.endsWith('/'), db.url);
  const replica = createClient({
    url: `file:${join(dir, 'slash.db')}`,
    syncUrl: db.url,
    authToken: db.token,
  });
  await replica.sync();
  assert.equal(await count(replica, 's'), 2);
  replica.close();
  remote.close();
});

test('offline writes: the replica writes locally, sync() pushes them, a conflict pushes nothing', async () => {
  const db = await newDatabase(`er-${RUN}-4`);
  const remote = createClient({ url: db.url, authToken: db.token });
  await remote.batch([
    'CREATE TABLE visits (id INTEGER PRIMARY KEY, site TEXT)',
    "INSERT INTO visits (site) VALUES ('depot')",
  ]);
  const dir = await localDir();
  const replica = createClient({
    url: `file:${join(dir, 'visits.db')}`,
    syncUrl: db.syncUrl,
    authToken: db.token,
    offline: true,
  });
  await replica.sync();
  assert.equal(await count(replica, 'visits'), 1);

  // Written locally (the server does not have it yet), then pushed by sync().
  await replica.batch([
    "INSERT INTO visits (site) VALUES ('north')",
    "INSERT INTO visits (site) VALUES ('south')",
  ]);
  assert.equal(await count(replica, 'visits'), 3);
  assert.equal(await count(remote, 'visits'), 1);
  await replica.sync();
  assert.equal(await count(remote, 'visits'), 3);

  // The server's next write comes back with the following sync, on top of the pushed ones.
  await remote.execute("INSERT INTO visits (site) VALUES ('east')");
  await replica.sync();
  assert.equal(await count(replica, 'visits'), 4);

  // Written on both sides: a conflict, and the server keeps only its own write.
  await remote.execute("INSERT INTO visits (site) VALUES ('west-server')");
  await replica.execute("INSERT INTO visits (site) VALUES ('west-offline')");
  await assert.rejects(replica.sync(), /conflict/i);
  const rs = await remote.execute("SELECT count(*) AS n FROM visits WHERE site = 'west-offline'");
  assert.equal(Number(rs.rows[0].n), 0);
  assert.equal(await count(remote, 'visits'), 5);
  replica.close();
  remote.close();
});

test('a read-only token syncs; a token of another database syncs nothing', async () => {
  const db = await newDatabase(`er-${RUN}-2`);
  const other = await newDatabase(`er-${RUN}-3`);
  const remote = createClient({ url: db.url, authToken: db.token });
  await remote.execute('CREATE TABLE secret (x TEXT)');
  await remote.execute("INSERT INTO secret VALUES ('only-here')");
  remote.close();

  const dir = await localDir();
  const readOnly = createClient({
    url: `file:${join(dir, 'ro.db')}`,
    syncUrl: db.syncUrl,
    authToken: db.readOnly,
  });
  await readOnly.sync();
  assert.equal(await count(readOnly, 'secret'), 1);
  readOnly.close();

  await assert.rejects(async () => {
    const stranger = createClient({
      url: `file:${join(dir, 'stranger.db')}`,
      syncUrl: db.syncUrl,
      authToken: other.token,
    });
    try {
      await stranger.sync();
      // Had it synced, the table would be there.
      await count(stranger, 'secret');
    } finally {
      stranger.close();
    }
  });
});
