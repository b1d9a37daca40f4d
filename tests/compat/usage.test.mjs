// Usage metering seen through the official clients: a known workload run with
// @libsql/client, then the exact rows read and written (and the storage) that the usage
// routes report. Environment (scripts/compat.sh): ATOLL_URL, ATOLL_TOKEN.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createClient } from '@libsql/client';

const URL_BASE = (process.env.ATOLL_URL ?? '').replace(/\/+$/, '');
const ADMIN_TOKEN = process.env.ATOLL_TOKEN ?? '';
if (!URL_BASE || !ADMIN_TOKEN) {
  throw new Error('ATOLL_URL and ATOLL_TOKEN must be set: run the suite with scripts/compat.sh');
}

async function api(method, path) {
  const res = await fetch(`${URL_BASE}${path}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body;
}

const usageOf = async (name) => (await api('GET', `/v1/databases/${name}/usage`)).database.total;

test('a known workload is metered exactly', async () => {
  const name = `metered-${randomBytes(3).toString('hex')}`;
  const created = await fetch(`${URL_BASE}/v1/databases`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name }),
  });
  assert.equal(created.status, 200);
  const { database } = await api('GET', `/v1/databases/${name}`);
  const { jwt } = await api('POST', `/v1/databases/${name}/auth/tokens`);
  const db = createClient({ url: database.http_url, authToken: jwt });
  try {
    await db.execute('CREATE TABLE items (id INTEGER PRIMARY KEY, label TEXT)');
    const before = await usageOf(name);

    const N = 20;
    for (let i = 1; i <= N; i++) {
      await db.execute({ sql: 'INSERT INTO items (id, label) VALUES (?, ?)', args: [i, `item ${i}`] });
    }
    for (const id of [3, 7, 11]) {
      const rs = await db.execute({ sql: 'SELECT label FROM items WHERE id = ?', args: [id] });
      assert.equal(rs.rows[0].label, `item ${id}`);
    }
    const scan = await db.execute("SELECT count(*) AS n FROM items WHERE label LIKE '%1%'");
    assert.ok(Number(scan.rows[0].n) > 0);

    const after = await usageOf(name);
    // Each insert writes one row and reads none (billed as one read, as sqld bills); each
    // point read by primary key reads one row; the scan reads all N.
    assert.equal(after.rows_written - before.rows_written, N);
    assert.equal(after.rows_read - before.rows_read, N + 3 + N);

    // Storage: the database's pages and its write-ahead log, at least the pages in use.
    const pages = Number((await db.execute('PRAGMA page_count')).rows[0].page_count);
    assert.ok(after.storage_bytes >= pages * 4096, `${after.storage_bytes} < ${pages} pages`);
    const again = await usageOf(name);
    assert.equal(again.rows_read, after.rows_read + 1, 'only the PRAGMA ran since (one read)');
    assert.equal(again.rows_written, after.rows_written);
  } finally {
    db.close();
    await fetch(`${URL_BASE}/v1/databases/${name}`, { method: 'DELETE', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  }
});
