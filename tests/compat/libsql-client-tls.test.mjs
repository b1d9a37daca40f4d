// The official @libsql/client against an `atoll dev` started with --tls-cert/--tls-key
// (see scripts/compat.sh): the URL Atoll's CLI prints with TLS (`libsql://` in the path
// form, which the client takes as HTTPS), and the `https://` and `wss://` forms of it.
//
// Environment (set by scripts/compat.sh):
//   ATOLL_TLS_URL        https://127.0.0.1:PORT of that server's platform API
//   ATOLL_TLS_TOKEN      login token of its administrator `admin`
//   NODE_EXTRA_CA_CERTS  its self-signed certificate, so that Node trusts it

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createClient } from '@libsql/client';

const URL_BASE = (process.env.ATOLL_TLS_URL ?? '').replace(/\/+$/, '');
const ADMIN_TOKEN = process.env.ATOLL_TLS_TOKEN ?? '';
const skip = URL_BASE && ADMIN_TOKEN ? false : 'no server with TLS (scripts/compat.sh needs openssl)';

const RUN = randomBytes(3).toString('hex');
let counter = 0;

async function api(method, path, body) {
  const res = await fetch(`${URL_BASE}/v1/organizations/admin${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const parsed = await res.json();
  assert.equal(res.status, 200, JSON.stringify(parsed));
  return parsed;
}

/** A new database: its `http_url` (https://127.0.0.1:<port>/db/<db>-admin/) and a token. */
async function database() {
  counter += 1;
  const name = `tls-${RUN}-${counter}`;
  await api('POST', '/databases', { name, group: 'default' });
  const { database } = await api('GET', `/databases/${name}`);
  const { jwt } = await api('POST', `/databases/${name}/auth/tokens`, {});
  return { httpUrl: database.http_url, jwt };
}

async function roundTrip(url, authToken) {
  const client = createClient({ url, authToken });
  try {
    await client.execute('CREATE TABLE t (x TEXT)');
    await client.batch(
      [{ sql: 'INSERT INTO t VALUES (?)', args: ['a'] }, { sql: 'INSERT INTO t VALUES (?)', args: ['b'] }],
      'write',
    );
    const rs = await client.execute('SELECT x FROM t ORDER BY x');
    assert.deepEqual(rs.rows.map((r) => r.x), ['a', 'b']);
  } finally {
    client.close();
  }
}

describe('@libsql/client over TLS', { skip }, () => {
  test('the API gives https URLs', async () => {
    const { httpUrl } = await database();
    assert.match(httpUrl, /^https:\/\/127\.0\.0\.1:\d+\/db\/tls-[a-f0-9]+-\d+-admin\/$/);
  });

  test('libsql:// (the URL the CLI prints with TLS)', async () => {
    const { httpUrl, jwt } = await database();
    await roundTrip(httpUrl.replace(/^https:/, 'libsql:'), jwt);
  });

  test('https://', async () => {
    const { httpUrl, jwt } = await database();
    await roundTrip(httpUrl, jwt);
  });

  test('wss:// (Hrana over a WebSocket, with an interactive transaction)', async () => {
    const { httpUrl, jwt } = await database();
    const url = httpUrl.replace(/^https:/, 'wss:');
    await roundTrip(url, jwt);
    const client = createClient({ url, authToken: jwt });
    try {
      const tx = await client.transaction('write');
      await tx.execute("INSERT INTO t VALUES ('c')");
      await tx.commit();
      const rs = await client.execute('SELECT count(*) AS n FROM t');
      assert.equal(Number(rs.rows[0].n), 3);
    } finally {
      client.close();
    }
  });
});
