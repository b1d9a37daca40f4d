// Turso Sync with the official client, @tursodatabase/sync (npm), unmodified: a local
// database that pulls the server's pages (`POST /pull-updates`) and pushes its own
// changes as SQL (`POST /v2/pipeline`); docs/DATA-PLANE.md, "Turso Sync".
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
import { connect } from '@tursodatabase/sync';

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
const open = [];
after(async () => {
  for (const db of open) await db.close().catch(() => {});
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
  return {
    // The Hrana client resolves `v2/pipeline` under a URL ending with '/'; the sync
    // client appends `/pull-updates` itself.
    url: database.http_url,
    syncUrl: database.http_url.replace(/\/+$/, ''),
    token: jwt,
    readOnly: readOnly.jwt,
  };
}

async function syncClient(db, { token = db.token, name = 'c' } = {}) {
  const dir = await mkdtemp(join(tmpdir(), 'atoll-turso-sync-'));
  dirs.push(dir);
  const client = await connect({ path: join(dir, `${name}.db`), url: db.syncUrl, authToken: token });
  open.push(client);
  return client;
}

async function bodies(client) {
  const rows = await (await client.prepare('SELECT body FROM notes ORDER BY id')).all();
  return rows.map((r) => r.body);
}

async function remoteBodies(remote) {
  const rs = await remote.execute('SELECT body FROM notes ORDER BY id');
  return rs.rows.map((r) => r.body);
}

test('a client bootstraps, pulls, pushes, and a second client sees its writes', async () => {
  const db = await newDatabase(`ts-${RUN}-1`);
  const remote = createClient({ url: db.url, authToken: db.token });
  await remote.batch([
    'CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)',
    "INSERT INTO notes (body) VALUES ('one'), ('two')",
  ]);

  const a = await syncClient(db, { name: 'a' });
  assert.deepEqual(await bodies(a), ['one', 'two'], 'bootstrap');

  await remote.execute("INSERT INTO notes (body) VALUES ('three')");
  assert.equal(await a.pull(), true, 'a pull after a remote write brings changes');
  assert.deepEqual(await bodies(a), ['one', 'two', 'three']);
  assert.equal(await a.pull(), false, 'nothing newer');

  await a.exec("INSERT INTO notes (id, body) VALUES (100, 'local')");
  await a.push();
  assert.deepEqual(await remoteBodies(remote), ['one', 'two', 'three', 'local'], 'pushed');

  const b = await syncClient(db, { name: 'b' });
  assert.deepEqual(await bodies(b), ['one', 'two', 'three', 'local']);

  await b.exec("UPDATE notes SET body = 'ONE' WHERE body = 'one'");
  await b.exec("DELETE FROM notes WHERE body = 'two'");
  await b.push();
  await a.pull();
  assert.deepEqual(await bodies(a), ['ONE', 'three', 'local'], 'a sees b after a pull');
  remote.close();
});

test('a client offline for a while catches up, and its offline writes reach the others', async () => {
  const db = await newDatabase(`ts-${RUN}-2`);
  const remote = createClient({ url: db.url, authToken: db.token });
  await remote.execute('CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)');
  const a = await syncClient(db, { name: 'a' });
  const b = await syncClient(db, { name: 'b' });

  // a is offline: it writes locally while the server moves on by many transactions.
  await a.exec("INSERT INTO notes (id, body) VALUES (1000000, 'written offline')");
  for (let i = 0; i < 20; i += 1) {
    const rows = Array.from({ length: 50 }, (_, j) => `('r${i}-${j}-${'x'.repeat(200)}')`);
    await remote.execute(`INSERT INTO notes (body) VALUES ${rows.join(', ')}`);
  }
  assert.equal(await a.pull(), true);
  const count = async (client) =>
    Number((await (await client.prepare('SELECT count(*) AS n FROM notes')).get()).n);
  assert.equal(await count(a), 1001, 'the server rows and the local one');
  await a.push();
  assert.equal(await b.pull(), true);
  assert.equal(await count(b), 1001);
  const last = await (await b.prepare('SELECT body FROM notes WHERE id = 1000000')).get();
  assert.equal(last.body, 'written offline');
  remote.close();
});

test('a read-only token pulls but cannot push', async () => {
  const db = await newDatabase(`ts-${RUN}-3`);
  const remote = createClient({ url: db.url, authToken: db.token });
  await remote.batch([
    'CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)',
    "INSERT INTO notes (body) VALUES ('one')",
  ]);
  const reader = await syncClient(db, { token: db.readOnly, name: 'ro' });
  assert.deepEqual(await bodies(reader), ['one']);
  await reader.exec("INSERT INTO notes (body) VALUES ('mine')");
  await assert.rejects(reader.push());
  assert.deepEqual(await remoteBodies(remote), ['one']);
  remote.close();
});

test('a token of another database gets no page', async () => {
  const db = await newDatabase(`ts-${RUN}-4`);
  const other = await newDatabase(`ts-${RUN}-5`);
  const dir = await mkdtemp(join(tmpdir(), 'atoll-turso-sync-'));
  dirs.push(dir);
  await assert.rejects(connect({ path: join(dir, 'x.db'), url: db.syncUrl, authToken: other.token }));
});

test('a restore in place reaches a client like any write: its next pull brings the restored state', async () => {
  const db = await newDatabase(`ts-${RUN}-6`);
  const remote = createClient({ url: db.url, authToken: db.token });
  await remote.batch([
    'CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)',
    "INSERT INTO notes (body) VALUES ('kept')",
  ]);
  const a = await syncClient(db, { name: 'a' });
  await new Promise((resolve) => setTimeout(resolve, 1500));
  const instant = new Date().toISOString();
  await new Promise((resolve) => setTimeout(resolve, 1500));
  await remote.execute("INSERT INTO notes (body) VALUES ('undone')");
  await a.pull();
  assert.deepEqual(await bodies(a), ['kept', 'undone']);

  const name = `ts-${RUN}-6`;
  await apiOk('POST', `/databases/${name}/restore`, { timestamp: instant });
  assert.deepEqual(await remoteBodies(remote), ['kept'], 'restored on the server');
  assert.equal(await a.pull(), true);
  assert.deepEqual(await bodies(a), ['kept'], 'the client has the restored state');
  remote.close();
});
