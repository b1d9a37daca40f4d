// Every database method of the official TypeScript SDK, @tursodatabase/api, against a
// running `atoll dev` (see scripts/compat.sh). Environment: ATOLL_URL, ATOLL_TOKEN.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createClient } from '@tursodatabase/api';

const URL_BASE = (process.env.ATOLL_URL ?? '').replace(/\/+$/, '');
const ADMIN_TOKEN = process.env.ATOLL_TOKEN ?? '';
if (!URL_BASE || !ADMIN_TOKEN) {
  throw new Error('ATOLL_URL and ATOLL_TOKEN must be set: run the suite with scripts/compat.sh');
}

const RUN = randomBytes(3).toString('hex');
let counter = 0;
const uniq = (prefix) => `${prefix}-${RUN}-${++counter}`;
const turso = createClient({ org: 'admin', token: ADMIN_TOKEN, baseUrl: `${URL_BASE}/v1/` });

/** Runs SQL on a database through its data-plane URL, as any HTTP client would. */
async function query(name, jwt, sql) {
  const res = await fetch(`${URL_BASE}/v1/databases/${name}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  const { database } = await res.json();
  const out = await fetch(`${database.http_url}v2/pipeline`, {
    method: 'POST',
    headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
    body: JSON.stringify({ requests: [{ type: 'execute', stmt: { sql } }, { type: 'close' }] }),
  });
  return { status: out.status, body: await out.json().catch(() => null) };
}

async function rejects(promise, status) {
  await assert.rejects(promise, (err) => {
    assert.equal(err.name, 'TursoClientError');
    assert.equal(err.status, status);
    assert.ok(err.message.length > 0);
    return true;
  });
}

describe('databases through @tursodatabase/api', () => {
  test('create, get, list and delete', async () => {
    const name = uniq('sdk-db');
    const created = await turso.databases.create(name, { group: 'default' });
    assert.equal(created.name, name);
    assert.match(created.id, /^[0-9a-f-]{36}$/);
    assert.ok(created.hostname.startsWith(`${name}-admin.`), created.hostname);

    const got = await turso.databases.get(name);
    assert.equal(got.name, name);
    assert.equal(got.id, created.id);
    assert.equal(got.hostname, created.hostname);
    assert.equal(got.group, 'default');
    assert.equal(got.primaryRegion, 'local');
    assert.deepEqual(got.regions, ['local']);
    assert.equal(got.type, 'logical');
    assert.equal(got.block_reads, false);
    assert.equal(got.block_writes, false);
    assert.equal(got.allow_attach, false);
    assert.equal(got.archived, false);

    const listed = await turso.databases.list({ group: 'default' });
    assert.ok(listed.some((d) => d.id === created.id));
    const deleted = await turso.databases.delete(name);
    assert.deepEqual(deleted, { database: name });
    await rejects(turso.databases.get(name), 404);
  });

  test('create without a group uses default; errors carry statuses', async () => {
    const name = uniq('sdk-nogroup');
    await turso.databases.create(name);
    assert.equal((await turso.databases.get(name)).group, 'default');
    await rejects(turso.databases.create(name), 409);
    await rejects(turso.databases.create(uniq('sdk-x'), { group: 'missing' }), 400);
    await rejects(turso.databases.create('Not_Valid'), 400);
    await rejects(turso.databases.delete(uniq('ghost')), 404);
  });

  test('seeds: a copy of another database', async () => {
    const source = uniq('sdk-src');
    await turso.databases.create(source);
    const { jwt } = await turso.databases.createToken(source);
    assert.equal((await query(source, jwt, 'CREATE TABLE t (v)')).status, 200);
    assert.equal((await query(source, jwt, "INSERT INTO t VALUES ('copied')")).status, 200);
    const copy = uniq('sdk-copy');
    await turso.databases.create(copy, { seed: { type: 'database', name: source } });
    const token = (await turso.databases.createToken(copy)).jwt;
    const { body } = await query(copy, token, 'SELECT v FROM t');
    assert.equal(body.results[0].response.result.rows[0][0].value, 'copied');
  });

  test('instances', async () => {
    const name = uniq('sdk-inst');
    const created = await turso.databases.create(name);
    const instances = await turso.databases.listInstances(name);
    assert.equal(instances.length, 1);
    assert.equal(instances[0].type, 'primary');
    assert.equal(instances[0].region, 'local');
    assert.equal(instances[0].hostname, created.hostname);
    const one = await turso.databases.getInstance(name, 'local');
    assert.deepEqual(one, instances[0]);
    await rejects(turso.databases.getInstance(name, 'mars'), 404);
  });

  test('database tokens: options, read-only, rotation', async () => {
    const name = uniq('sdk-tok');
    await turso.databases.create(name);
    const full = await turso.databases.createToken(name, { expiration: '2w1d30m' });
    assert.equal(typeof full.jwt, 'string');
    assert.equal((await query(name, full.jwt, 'CREATE TABLE t (x)')).status, 200);
    const reader = await turso.databases.createToken(name, { authorization: 'read-only' });
    assert.equal((await query(name, reader.jwt, 'SELECT * FROM t')).status, 200);
    assert.equal((await query(name, reader.jwt, 'INSERT INTO t VALUES (1)')).status, 403);
    await rejects(turso.databases.createToken(name, { expiration: 'soon' }), 400);

    const rotated = await turso.databases.rotateTokens(name);
    assert.deepEqual(rotated, {});
    assert.equal((await query(name, full.jwt, 'SELECT 1')).status, 401);
  });

  test('group tokens through the SDK', async () => {
    const name = uniq('sdk-grp');
    await turso.databases.create(name);
    const { jwt } = await turso.groups.createToken('default', { authorization: 'full-access' });
    assert.equal((await query(name, jwt, 'SELECT 1')).status, 200);
    assert.deepEqual(await turso.groups.rotateTokens('default'), {});
    assert.equal((await query(name, jwt, 'SELECT 1')).status, 401);
  });

  test('updateVersion answers {}', async () => {
    const name = uniq('sdk-ver');
    await turso.databases.create(name);
    assert.deepEqual(await turso.databases.updateVersion(name), {});
  });
});
