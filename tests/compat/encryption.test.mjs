// Encryption with the customer's key (Turso's `remote_encryption`, docs/ENCRYPTION.md)
// through the official clients, against a running `atoll dev` (see scripts/compat.sh):
// the database is created with @tursodatabase/api's `remote_encryption`, and queried with
// @libsql/client's `remoteEncryptionKey`, which sends the key in `x-turso-encryption-key`
// with every request. Without the key, or with another, nothing is served.
// Environment: ATOLL_URL, ATOLL_TOKEN.

import { describe, test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createClient as createPlatformClient } from '@tursodatabase/api';
import { createClient, LibsqlError } from '@libsql/client';

const URL_BASE = (process.env.ATOLL_URL ?? '').replace(/\/+$/, '');
const ADMIN_TOKEN = process.env.ATOLL_TOKEN ?? '';
if (!URL_BASE || !ADMIN_TOKEN) {
  throw new Error('ATOLL_URL and ATOLL_TOKEN must be set: run the suite with scripts/compat.sh');
}

const RUN = randomBytes(3).toString('hex');
let counter = 0;
const uniq = (prefix) => `${prefix}-${RUN}-${++counter}`;
const turso = createPlatformClient({ org: 'admin', token: ADMIN_TOKEN, baseUrl: `${URL_BASE}/v1/` });

const made = [];
const clients = [];
after(async () => {
  for (const c of clients) c.close();
  for (const name of made) await turso.databases.delete(name);
});

/** An encrypted database: { name, url, token, key }. */
async function encryptedDatabase(cipher, keyBytes) {
  const name = uniq('enc');
  const key = randomBytes(keyBytes).toString('base64');
  await turso.databases.create(name, {
    group: 'default',
    remote_encryption: { encryption_key: key, encryption_cipher: cipher },
  });
  made.push(name);
  const res = await fetch(`${URL_BASE}/v1/organizations/admin/databases/${name}`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  const { database } = await res.json();
  const { jwt } = await turso.databases.createToken(name, { authorization: 'full-access' });
  return { name, url: database.http_url, token: jwt, key };
}

function client(url, authToken, remoteEncryptionKey) {
  const c = createClient({ url, authToken, remoteEncryptionKey });
  clients.push(c);
  return c;
}

/**
 * A refusal about the key: the server answers a Hrana error body (`message`, `code`) with
 * its HTTP status, which the client raises as a LibsqlError with that code.
 */
async function rejectsWith(promise, code, message) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof LibsqlError, `expected a LibsqlError, got ${err?.stack ?? err}`);
    assert.equal(err.code, code, `expected ${code}: ${err.code} ${err.message}`);
    assert.match(err.message, message);
    return true;
  });
}

describe('remote encryption', () => {
  for (const [cipher, keyBytes] of [
    ['aes256gcm', 32],
    ['aes128gcm', 16],
    ['chacha20poly1305', 32],
    ['aegis256', 32],
    ['aegis128l', 16],
    ['aegis256x4', 32],
  ]) {
    test(`${cipher}: the client with the key reads and writes, in batches and transactions`, async () => {
      const db = await encryptedDatabase(cipher, keyBytes);
      const keyed = client(db.url, db.token, db.key);
      await keyed.execute('CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)');
      await keyed.batch(
        [
          { sql: 'INSERT INTO notes (body) VALUES (?)', args: ['first secret'] },
          { sql: 'INSERT INTO notes (body) VALUES (?)', args: ['second secret'] },
        ],
        'write',
      );
      const tx = await keyed.transaction('write');
      await tx.execute({ sql: 'INSERT INTO notes (body) VALUES (?)', args: ['third secret'] });
      const inside = await tx.execute('SELECT count(*) AS n FROM notes');
      assert.equal(Number(inside.rows[0].n), 3);
      await tx.commit();
      const rs = await keyed.execute('SELECT body FROM notes ORDER BY id');
      assert.deepEqual(rs.rows.map((r) => r.body), ['first secret', 'second secret', 'third secret']);

      // Without the key, or with another, nothing — also while keyed connections are pooled.
      await rejectsWith(client(db.url, db.token).execute('SELECT body FROM notes'), 'ENCRYPTION_KEY_REQUIRED', /is encrypted/);
      const other = randomBytes(keyBytes).toString('base64');
      await rejectsWith(client(db.url, db.token, other).execute('SELECT body FROM notes'), 'ENCRYPTION_KEY_INVALID', /not the key/);
      await rejectsWith(
        client(db.url, db.token, other).execute("INSERT INTO notes (body) VALUES ('forged')"),
        'ENCRYPTION_KEY_INVALID',
        /not the key/,
      );
      const after = await keyed.execute('SELECT count(*) AS n FROM notes');
      assert.equal(Number(after.rows[0].n), 3, 'nothing was written with the wrong key');
    });
  }

  test("a rotation (Atoll's) moves the database to a new key: the same client code with the new key reads everything", async () => {
    const db = await encryptedDatabase('aes256gcm', 32);
    const before = client(db.url, db.token, db.key);
    await before.execute('CREATE TABLE ledger (id INTEGER PRIMARY KEY, entry TEXT)');
    await before.batch(
      Array.from({ length: 200 }, (_, i) => ({ sql: 'INSERT INTO ledger (entry) VALUES (?)', args: [`entry ${i}`] })),
      'write',
    );
    const newKey = randomBytes(32).toString('base64');
    const res = await fetch(`${URL_BASE}/v1/organizations/admin/databases/${db.name}/encryption/rotate`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ current_encryption_key: db.key, encryption_key: newKey, encryption_cipher: 'chacha20poly1305' }),
    });
    const rotated = await res.json();
    assert.equal(res.status, 200, JSON.stringify(rotated));
    assert.equal(rotated.encryption_cipher, 'chacha20poly1305');
    assert.ok(rotated.pages_rewritten >= 2, JSON.stringify(rotated));

    // The client holding the old key (its connections were pooled) is refused from now on.
    await rejectsWith(before.execute('SELECT count(*) AS n FROM ledger'), 'ENCRYPTION_KEY_INVALID', /not the key/);
    const after = client(db.url, db.token, newKey);
    const rs = await after.execute('SELECT count(*) AS n, max(entry) AS last FROM ledger');
    assert.equal(Number(rs.rows[0].n), 200);
    await after.execute({ sql: 'INSERT INTO ledger (entry) VALUES (?)', args: ['after the rotation'] });
    const again = await after.execute('SELECT entry FROM ledger ORDER BY id DESC LIMIT 1');
    assert.equal(again.rows[0].entry, 'after the rotation');
  });

  test('a copy of an encrypted database (seed) is encrypted under the same key', async () => {
    const src = await encryptedDatabase('aes128gcm', 16);
    const keyed = client(src.url, src.token, src.key);
    await keyed.execute('CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)');
    await keyed.execute({ sql: 'INSERT INTO kv VALUES (?, ?)', args: ['door', 'code 1234'] });
    const name = uniq('enc-copy');
    await turso.databases.create(name, {
      group: 'default',
      seed: { type: 'database', name: src.name },
      remote_encryption: { encryption_key: src.key, encryption_cipher: 'aes128gcm' },
    });
    made.push(name);
    const res = await fetch(`${URL_BASE}/v1/organizations/admin/databases/${name}`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    const { database } = await res.json();
    assert.equal(database.encryption_cipher, 'aes128gcm');
    const { jwt } = await turso.databases.createToken(name, { authorization: 'full-access' });
    const copy = client(database.http_url, jwt, src.key);
    const rs = await copy.execute('SELECT v FROM kv');
    assert.equal(rs.rows[0].v, 'code 1234');
    await rejectsWith(client(database.http_url, jwt).execute('SELECT v FROM kv'), 'ENCRYPTION_KEY_REQUIRED', /is encrypted/);
    // Another key for the copy is refused: a copy keeps its source's key.
    await assert.rejects(
      turso.databases.create(uniq('enc-copy'), {
        group: 'default',
        seed: { type: 'database', name: src.name },
        remote_encryption: { encryption_key: randomBytes(16).toString('base64'), encryption_cipher: 'aes128gcm' },
      }),
      (err) => err.status === 403,
    );
  });

  test('a cipher the server cannot do is refused by name, never ignored', async () => {
    const name = uniq('unknown-cipher');
    await assert.rejects(
      turso.databases.create(name, {
        group: 'default',
        remote_encryption: { encryption_key: randomBytes(32).toString('base64'), encryption_cipher: 'aegis512' },
      }),
      (err) => {
        assert.equal(err.name, 'TursoClientError');
        assert.equal(err.status, 400);
        assert.match(err.message, /aes256gcm, aes128gcm, chacha20poly1305/);
        return true;
      },
    );
    await assert.rejects(turso.databases.get(name), (err) => err.status === 404);
  });

  test('a plain database refuses a key: its client would believe it encrypted', async () => {
    const name = uniq('plain');
    await turso.databases.create(name, { group: 'default' });
    made.push(name);
    const res = await fetch(`${URL_BASE}/v1/organizations/admin/databases/${name}`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    const { database } = await res.json();
    const { jwt } = await turso.databases.createToken(name);
    await rejectsWith(
      client(database.http_url, jwt, randomBytes(32).toString('base64')).execute('SELECT 1'),
      'ENCRYPTION_NOT_AVAILABLE',
      /not encrypted/,
    );
    const rs = await client(database.http_url, jwt).execute('SELECT 1 AS one');
    assert.equal(Number(rs.rows[0].one), 1);
  });
});
