// The web console in a real browser: Debian's chromium, headless, driven by playwright-core,
// against the `atoll dev` that scripts/console.sh started.
//
// Environment (from scripts/console.sh): ATOLL_URL, ATOLL_DB_URL, ATOLL_TOKEN (the admin's
// login token, for setting up what the browser does not), ATOLL_PASSWORD, CHROMIUM,
// SCREENSHOTS (a git-ignored folder).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const API = process.env.ATOLL_URL;
const DB_URL = process.env.ATOLL_DB_URL;
const TOKEN = process.env.ATOLL_TOKEN;
const PASSWORD = process.env.ATOLL_PASSWORD;
const SHOTS = process.env.SCREENSHOTS || join(process.cwd(), "screenshots");
const VIEWER_PASSWORD = "viewer-password-1234";

let browser;

/** Calls the API as the admin, outside the browser (setting up a scenario). */
async function admin(method, path, body) {
  const response = await fetch(`${API}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await response.json().catch(() => null);
  assert.ok(response.ok, `${method} ${path}: ${response.status} ${JSON.stringify(json)}`);
  return json;
}

before(async () => {
  assert.ok(API && TOKEN && PASSWORD, "run through scripts/console.sh (ATOLL_URL, ATOLL_TOKEN, ATOLL_PASSWORD)");
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
});

after(async () => {
  // playwright-core gave the browser a fresh profile in a temporary folder, removed here.
  await browser?.close();
});

/** A fresh browser context (no cookies), with console errors collected. */
async function newPage(viewport = { width: 1100, height: 760 }) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    // A refused request shows in the console as a failed resource load; those are
    // asserted where they are expected, so only script errors count here.
    if (m.type() === "error" && !/Failed to load resource/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  return { context, page, problems };
}

async function logIn(page, username, password) {
  await page.goto(`${API}/`);
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Log in" }).click();
  await page.getByRole("heading", { name: "Databases", level: 1 }).waitFor();
}

/** Form controls on the page with no accessible name (no label, no aria-label). */
function unlabelled(page) {
  return page.evaluate(() => [...document.querySelectorAll("input, select, textarea")]
    .filter((el) => el.type !== "hidden" && !el.closest("[hidden]"))
    .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute("aria-label"))
    .map((el) => el.outerHTML));
}

async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: false });
}

test("log in, create a database, query it, see its usage; the session is an HttpOnly cookie", async () => {
  const { context, page, problems } = await newPage();
  // A wrong password is said so, in the form.
  await page.goto(`${API}/`);
  assert.match(page.url(), /\/console\/$/);
  await shot(page, "login");
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill("not-the-password");
  await page.getByRole("button", { name: "Log in" }).click();
  await page.getByRole("alert").filter({ hasText: "invalid username or password" }).waitFor();

  await logIn(page, "admin", PASSWORD);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "atoll_session");
  assert.ok(session, "a session cookie");
  assert.equal(session.httpOnly, true);
  assert.equal(session.sameSite, "Strict");
  assert.equal(await page.evaluate(() => document.cookie.includes("atoll_session")), false);

  // Create a database.
  await page.getByLabel("Name", { exact: true }).fill("shop");
  await page.getByRole("button", { name: "Create database" }).click();
  await page.getByRole("heading", { name: "Database shop" }).waitFor();
  await shot(page, "database");

  // Run queries in the editor: a table, rows, and the result as a table.
  await page.getByRole("link", { name: "Open in the SQL editor" }).click();
  await page.getByRole("heading", { name: "SQL editor: shop" }).waitFor();
  const editor = page.getByLabel("SQL", { exact: true });
  await editor.fill("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT);\nINSERT INTO items (name) VALUES ('lamp'), ('desk; with a semicolon');\nSELECT id, name FROM items ORDER BY id;");
  await page.getByRole("button", { name: "Run" }).click();
  const result = page.getByRole("table", { name: "Query result" });
  await result.waitFor();
  assert.deepEqual(await result.locator("th").allTextContents(), ["id", "name"]);
  assert.deepEqual(await result.locator("tbody td").allTextContents(), ["1", "lamp", "2", "desk; with a semicolon"]);
  await shot(page, "sql-editor");

  // An error is shown as one, and the history keeps what ran.
  await editor.fill("SELECT * FROM no_such_table");
  await editor.press("Control+Enter");
  await page.getByRole("alert").filter({ hasText: "no such table" }).waitFor();
  const history = await page.locator(".history button").allTextContents();
  assert.equal(history[0], "SELECT * FROM no_such_table");
  assert.match(history[1], /^CREATE TABLE items/);
  // The picture for the README: one query and its table.
  await editor.fill("SELECT id, name FROM items ORDER BY id;");
  await page.getByRole("button", { name: "Run" }).click();
  await page.getByRole("table", { name: "Query result" }).waitFor();
  await page.evaluate(() => document.getElementById("toasts").replaceChildren());
  await shot(page, "sql-editor-result");

  // Usage: charts over time (rows, storage) and the bars against the plan.
  await page.getByRole("link", { name: "Usage" }).click();
  await page.getByRole("heading", { name: "Usage", level: 1 }).waitFor();
  const rowsChart = page.locator("figure.chart-figure").filter({ hasText: "Rows read and written per day" });
  await rowsChart.locator("svg.chart").waitFor();
  assert.equal(await rowsChart.locator("polyline").count(), 2);
  // The rows written today (3 statements' worth) reach the chart's data.
  const written = await rowsChart.locator("table.visually-hidden tbody tr:last-child td").evaluateAll(
    (cells) => cells.map((c) => c.dataset.value));
  assert.ok(Number(written[2]) >= 2, `rows written today: ${written}`);
  assert.ok(await page.getByText(/^Rows read: /).count() >= 1);
  await shot(page, "usage");

  assert.deepEqual(problems, []);
  await context.close();
});

test("an encrypted database: created with a key from the form, queried with it from the SQL editor, refused without it", async () => {
  const { context, page, problems } = await newPage();
  await logIn(page, "admin", PASSWORD);
  const key = Buffer.from(Array.from({ length: 32 }, (_, i) => i * 7 + 1)).toString("base64");
  await page.getByLabel("Name", { exact: true }).fill("vault");
  await page.getByLabel("Encryption key").fill(key);
  await page.getByLabel("Cipher").selectOption("chacha20poly1305");
  await page.getByRole("button", { name: "Create database" }).click();
  await page.getByRole("heading", { name: "Database vault" }).waitFor();
  // The key went to the API once and is not kept by the page's storage.
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }));
  assert.ok(!stored.includes(key), "the key is not in the browser's storage");

  await page.getByRole("link", { name: "Open in the SQL editor" }).click();
  await page.getByRole("heading", { name: "SQL editor: vault" }).waitFor();
  const editor = page.getByLabel("SQL", { exact: true });
  await editor.fill("CREATE TABLE secrets (v TEXT); INSERT INTO secrets VALUES ('the recipe'); SELECT v FROM secrets;");
  await page.getByRole("button", { name: "Run" }).click();
  await page.getByRole("alert").filter({ hasText: "is encrypted" }).waitFor();

  await page.getByLabel("Encryption key").fill(key);
  await page.getByRole("button", { name: "Run" }).click();
  const result = page.getByRole("table", { name: "Query result" });
  await result.waitFor();
  assert.deepEqual(await result.locator("tbody td").allTextContents(), ["the recipe"]);
  // Its statements are its data: none in the history.
  assert.equal(await page.locator(".history button").count(), 0);
  const stored2 = await page.evaluate(() => JSON.stringify({ ...localStorage }));
  assert.ok(!stored2.includes(key) && !stored2.includes("the recipe"), stored2);
  await shot(page, "sql-editor-encrypted");

  // The API agrees: without the key, the data plane answers 401.
  const { jwt } = await admin("POST", "/v1/organizations/admin/databases/vault/auth/tokens", {});
  const { database } = await admin("GET", "/v1/organizations/admin/databases/vault");
  const refused = await fetch(`${database.http_url}v2/pipeline`, {
    method: "POST",
    headers: { Authorization: `Bearer ${jwt}`, "Content-Type": "application/json" },
    body: JSON.stringify({ requests: [{ type: "execute", stmt: { sql: "SELECT v FROM secrets" } }] }),
  });
  assert.equal(refused.status, 401);
  // Kept: a deleted database would be listed among the restorable ones other tests read.
  assert.deepEqual(problems, []);
  await context.close();
});

test("mint an API token (shown once) and revoke it", async () => {
  const { context, page, problems } = await newPage();
  await logIn(page, "admin", PASSWORD);
  await page.getByRole("link", { name: "API tokens" }).click();
  await page.getByRole("heading", { name: "API tokens", level: 1 }).waitFor();
  await page.getByLabel("Name", { exact: true }).fill("console-ci");
  await page.getByRole("button", { name: "Mint token" }).click();
  const secret = (await page.locator("[data-secret]").textContent()).trim();
  assert.match(secret, /^atoll_/);
  // It works, as any API token does.
  let check = await fetch(`${API}/v1/organizations/admin/databases`, { headers: { Authorization: `Bearer ${secret}` } });
  assert.equal(check.status, 200);
  await shot(page, "tokens");

  await page.getByRole("button", { name: "Revoke console-ci" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Revoke" }).click();
  await page.getByRole("status").filter({ hasText: "Token console-ci revoked." }).waitFor();
  await page.getByRole("button", { name: "Revoke console-ci" }).waitFor({ state: "detached" });
  check = await fetch(`${API}/v1/organizations/admin/databases`, { headers: { Authorization: `Bearer ${secret}` } });
  assert.equal(check.status, 401);
  // Reloading does not show the secret again.
  await page.reload();
  await page.getByRole("heading", { name: "API tokens", level: 1 }).waitFor();
  assert.equal(await page.locator("[data-secret]").count(), 0);

  assert.deepEqual(problems, []);
  await context.close();
});

test("a viewer sees the databases but is offered no way to change them, and the API refuses", async () => {
  await admin("POST", "/v1/admin/users", { username: "vera", password: VIEWER_PASSWORD, email: "vera@example.com" });
  const { org } = await admin("POST", "/v1/organizations", { name: "Acme" });
  await admin("POST", `/v1/organizations/${org.slug}/members`, { username: "vera", role: "viewer" });
  await admin("POST", `/v1/organizations/${org.slug}/databases`, { name: "orders", group: "default" });

  const { context, page, problems } = await newPage({ width: 390, height: 844 });
  await logIn(page, "vera", VIEWER_PASSWORD);
  await page.getByLabel("Organization", { exact: true }).selectOption(org.slug);
  await page.getByRole("link", { name: "orders" }).click();
  await page.getByRole("heading", { name: "Database orders" }).waitFor();
  await page.getByText("Your role (viewer) can see this").first().waitFor();
  await page.getByText("Restorable until").waitFor();
  for (const name of [/^Destroy/, /Create token/, /Save configuration/, /Invalidate all tokens/, /Restore in place/, /Copy as of/]) {
    assert.equal(await page.getByRole("button", { name }).count(), 0, `a viewer is offered ${name}`);
  }
  assert.equal(await page.getByRole("checkbox", { name: "Block writes" }).isDisabled(), true);
  await shot(page, "viewer-phone");
  // The phone-width layout does not scroll sideways.
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page is ${overflow}px wider than the phone`);

  // Even a hand-made request from the console's own page is refused by the policy table.
  const status = await page.evaluate(async (slug) => {
    const r = await fetch(`/v1/organizations/${slug}/databases/orders`, { method: "DELETE", headers: { "X-Atoll-CSRF": "1" } });
    return r.status;
  }, org.slug);
  assert.equal(status, 403);
  await admin("GET", `/v1/organizations/${org.slug}/databases/orders`);

  assert.deepEqual(problems, []);
  await context.close();
});

test("another site cannot use the session (CSRF): no header, no preflight, no effect", async () => {
  const { context, page } = await newPage();
  await logIn(page, "admin", PASSWORD);
  // The same page without the CSRF header: the cookie alone is refused.
  const plain = await page.evaluate(async () => (await fetch("/v1/user")).status);
  assert.equal(plain, 403);

  // A page of another origin (the data plane's port: same site, other origin), which the
  // browser still sends the SameSite cookie from.
  await page.goto(`${DB_URL}/health`);
  const outcome = await page.evaluate(async (api) => {
    const answers = {};
    // A simple (no-preflight) cross-origin POST carries the cookie but cannot add the header.
    await fetch(`${api}/v1/organizations/admin/databases`, {
      method: "POST", mode: "no-cors", credentials: "include",
      headers: { "Content-Type": "text/plain" }, body: JSON.stringify({ name: "forged", group: "default" }),
    }).then(() => { answers.simple = "sent"; }, (e) => { answers.simple = e.message; });
    // With the header, the browser must ask first (CORS preflight), and the API says no.
    await fetch(`${api}/v1/organizations/admin/databases`, {
      method: "POST", credentials: "include", headers: { "X-Atoll-CSRF": "1", "Content-Type": "application/json" },
      body: JSON.stringify({ name: "forged2", group: "default" }),
    }).then((r) => { answers.preflighted = r.status; }, () => { answers.preflighted = "blocked"; });
    return answers;
  }, API);
  assert.equal(outcome.preflighted, "blocked");
  const { databases } = await admin("GET", "/v1/organizations/admin/databases");
  const names = databases.map((d) => d.Name);
  assert.ok(!names.includes("forged") && !names.includes("forged2"), `forged databases: ${names}`);
  await context.close();
});

test("upload a file with progress, copy it, destroy it after typing its name, restore it", async () => {
  // A SQLite file as the upload wants it: WAL mode, checkpointed, 4096-byte pages.
  const dir = mkdtempSync(join(tmpdir(), "atoll-console-upload-"));
  const file = join(dir, "local.db");
  execFileSync("python3", ["-c", `
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("PRAGMA page_size=4096"); c.execute("PRAGMA journal_mode=WAL")
c.execute("CREATE TABLE notes (body TEXT)")
c.executemany("INSERT INTO notes VALUES (?)", [("note %d" % i,) for i in range(500)])
c.commit(); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()`, file]);

  const { context, page, problems } = await newPage();
  await logIn(page, "admin", PASSWORD);
  await page.getByLabel("Name", { exact: true }).fill("uploaded");
  await page.getByLabel("Source").selectOption("upload");
  await page.getByLabel("SQLite file").setInputFiles(file);
  // Record what the progress text says while the file goes up (the page is one document:
  // the record outlives the move to the database's page).
  await page.evaluate(() => {
    window.uploadProgress = [];
    const text = document.querySelector("progress + span");
    new MutationObserver(() => window.uploadProgress.push(text.textContent)).observe(text, { childList: true });
  });
  await page.getByRole("button", { name: "Create database" }).click();
  await page.getByRole("heading", { name: "Database uploaded" }).waitFor();
  const progress = await page.evaluate(() => window.uploadProgress);
  assert.equal(progress.at(-1), "100%", `progress shown: ${progress}`);
  rmSync(dir, { recursive: true, force: true });

  // Its rows arrived: count them in the editor.
  await page.goto(`${API}/console/#/sql/uploaded`);
  const editor = page.getByLabel("SQL", { exact: true });
  await editor.fill("SELECT count(*) AS n FROM notes");
  await page.getByRole("button", { name: "Run" }).click();
  const counted = page.getByRole("table", { name: "Query result" });
  await counted.waitFor();
  assert.deepEqual(await counted.locator("tbody td").allTextContents(), ["500"]);

  // A copy of it.
  await page.getByRole("link", { name: "Databases" }).click();
  await page.getByLabel("Name", { exact: true }).fill("uploaded-copy");
  await page.getByLabel("Source").selectOption("copy");
  await page.getByLabel("Copy from").selectOption("uploaded");
  await page.getByRole("button", { name: "Create database" }).click();
  await page.getByRole("heading", { name: "Database uploaded-copy" }).waitFor();

  // Destroy: the button stays disabled until the name is typed.
  await page.getByRole("button", { name: "Destroy uploaded-copy" }).click();
  const dialog = page.getByRole("dialog");
  const confirm = dialog.getByRole("button", { name: "Destroy" });
  assert.equal(await confirm.isDisabled(), true);
  await dialog.getByLabel("Type uploaded-copy to confirm").fill("uploaded-cop");
  assert.equal(await confirm.isDisabled(), true);
  await dialog.getByLabel("Type uploaded-copy to confirm").fill("uploaded-copy");
  await confirm.click();
  await page.getByRole("heading", { name: "Databases", level: 1 }).waitFor();
  await page.getByRole("button", { name: "Restore" }).waitFor();
  await shot(page, "databases");

  // The admin's organization is on a paid plan: restore brings it back.
  await page.getByRole("button", { name: "Restore" }).click();
  await page.getByRole("link", { name: "uploaded-copy" }).waitFor();
  await admin("GET", "/v1/organizations/admin/databases/uploaded-copy");

  assert.deepEqual(problems, []);
  await context.close();
});

/** Runs statements in the console's SQL editor of `name`; answers the last result's cells. */
async function runSql(page, name, sql) {
  await page.goto(`${API}/console/#/sql/${encodeURIComponent(name)}`);
  await page.getByRole("heading", { name: `SQL editor: ${name}` }).waitFor();
  await page.getByLabel("SQL", { exact: true }).fill(sql);
  await page.getByRole("button", { name: "Run" }).click();
  const result = page.getByRole("table", { name: "Query result" }).last();
  await result.waitFor();
  return result.locator("tbody td").allTextContents();
}

/** The daily data of a chart figure: [label, value (null: not measured)] per day. */
function chartData(figure) {
  return figure.locator("table.visually-hidden tbody tr").evaluateAll((rows) => rows.map((r) => {
    const cell = r.cells[1];
    return [r.cells[0].textContent, cell.dataset.value === undefined ? null : Number(cell.dataset.value)];
  }));
}

test("storage over time: a database's size day by day, and the organization's, against the plan's quota", async () => {
  // On a plan with a storage quota for this test (the instance's default has none).
  const { organization: before } = await admin("GET", "/v1/organizations/admin/usage");
  await admin("POST", "/v1/admin/organizations/admin/plan", { plan: "scaler" });
  const { context, page, problems } = await newPage();
  await logIn(page, "admin", PASSWORD);
  await page.getByLabel("Name", { exact: true }).fill("growing");
  await page.getByRole("button", { name: "Create database" }).click();
  await page.getByRole("heading", { name: "Database growing" }).waitFor();
  await runSql(page, "growing", "CREATE TABLE blobs (b BLOB);\nINSERT INTO blobs VALUES (randomblob(300000));\nSELECT length(b) FROM blobs;");

  // Yesterday it was small: a sample from then, written into the store as the collector
  // would have recorded it (the server keeps one per database and hour).
  const { database } = await admin("GET", "/v1/organizations/admin/databases/growing");
  const yesterday = Math.floor(Date.now() / 3600000) * 3600000 - 24 * 3600000;
  execFileSync("python3", ["-c", `
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30)
c.execute("INSERT INTO storage_samples (database_id, org_id, bucket, storage_bytes) SELECT id, org_id, ?, 8192 FROM databases WHERE id = ?", (int(sys.argv[2]), sys.argv[3]))
c.commit(); c.close()`, join(process.env.ATOLL_DATA_DIR, "meta.db"), String(yesterday), database.DbId]);
  const { organization } = await admin("GET", "/v1/organizations/admin/usage");
  const quota = organization.quotas.storage_bytes;

  // The database's page: storage per day, yesterday's size, today's after the write.
  await page.goto(`${API}/console/#/databases/growing`);
  const storage = page.locator("figure.chart-figure").filter({ hasText: "Storage per day" });
  await storage.locator("svg.chart").waitFor();
  const days = await chartData(storage);
  assert.equal(days.length, 14);
  assert.equal(days.at(-2)[1], 8192, `yesterday: ${JSON.stringify(days)}`);
  assert.ok(days.at(-1)[1] >= 300000, `today: ${JSON.stringify(days)}`);
  assert.equal(days[0][1], null, "nothing measured before the database existed");
  assert.ok(quota > 0, `the scaler plan's storage quota: ${quota}`);
  assert.equal(Number(await storage.getAttribute("data-limit")), quota);
  assert.match(await storage.locator(".legend").textContent(), /Plan's storage quota \(\d+ GB, far above this chart\)/);
  await storage.scrollIntoViewIfNeeded();
  await storage.screenshot({ path: join(SHOTS, "storage-history.png") });

  // The usage page: the organization's storage (every database summed), then this one.
  await page.getByRole("navigation").getByRole("link", { name: "Usage" }).click();
  const orgStorage = page.locator("figure.chart-figure").filter({ hasText: "Storage per day" });
  await orgStorage.filter({ hasText: "all of" }).locator("svg.chart").waitFor();
  const orgDays = await chartData(orgStorage);
  assert.ok(orgDays.at(-1)[1] >= days.at(-1)[1], `organization today: ${JSON.stringify(orgDays)}`);
  assert.ok(orgDays.at(-2)[1] >= 8192);
  await page.getByLabel("Database", { exact: true }).selectOption("growing");
  await orgStorage.filter({ hasText: "growing" }).locator("svg.chart").waitFor();
  assert.deepEqual(await chartData(page.locator("figure.chart-figure").filter({ hasText: "Storage per day" })), days);
  await shot(page, "usage-storage");

  assert.deepEqual(problems, []);
  await context.close();
  await admin("POST", "/v1/admin/organizations/admin/plan", { plan: before.plan });
});

/** Waits until object storage holds the database's commits from `instant` (ms) on. */
async function backedUpTo(name, instant) {
  const deadline = Date.now() + 30000;
  for (;;) {
    const backups = await admin("GET", `/v1/organizations/admin/databases/${name}/backups`);
    if (backups.restorable_until && Date.parse(backups.restorable_until) >= instant && backups.lag.commits === 0) return backups;
    assert.ok(Date.now() < deadline, `not backed up to ${new Date(instant).toISOString()}: ${JSON.stringify(backups)}`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

test("point-in-time: a copy as of a time holds the old data; a restore in place brings it back", async () => {
  const { context, page, problems } = await newPage();
  await logIn(page, "admin", PASSWORD);
  await page.getByLabel("Name", { exact: true }).fill("ledger");
  await page.getByRole("button", { name: "Create database" }).click();
  await page.getByRole("heading", { name: "Database ledger" }).waitFor();
  await runSql(page, "ledger", "CREATE TABLE entries (v TEXT);\nINSERT INTO entries VALUES ('old');\nSELECT v FROM entries;");
  // A whole second after the old state, and the change a second after that.
  const then = Math.ceil((Date.now() + 1) / 1000) * 1000;
  const thenInput = new Date(then).toISOString().slice(0, 19);
  while (Date.now() < then + 1100) await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(await runSql(page, "ledger", "UPDATE entries SET v = 'new';\nINSERT INTO entries VALUES ('newer');\nSELECT v FROM entries ORDER BY rowid;"), ["new", "newer"]);
  // The window ends at the last commit shipped: the change, made after `then`.
  await backedUpTo("ledger", then + 1000);

  // The databases page's copy, as of then.
  await page.goto(`${API}/console/#/databases`);
  await page.getByLabel("Name", { exact: true }).fill("ledger-then");
  await page.getByLabel("Source").selectOption("copy");
  await page.getByLabel("Copy from").selectOption("ledger");
  await page.getByLabel("As of (point in time, UTC)").fill(thenInput);
  await page.getByRole("button", { name: "Create database" }).click();
  await page.getByRole("heading", { name: "Database ledger-then" }).waitFor();
  assert.deepEqual(await runSql(page, "ledger-then", "SELECT v FROM entries ORDER BY rowid"), ["old"]);
  // Outside the window the server says so, in the form.
  await page.goto(`${API}/console/#/databases`);
  await page.getByLabel("Name", { exact: true }).fill("ledger-never");
  await page.getByLabel("Source").selectOption("copy");
  await page.getByLabel("Copy from").selectOption("ledger");
  await page.getByLabel("As of (point in time, UTC)").fill("2020-01-01T00:00:00");
  await page.getByRole("button", { name: "Create database" }).click();
  await page.locator(".form-errors [role=alert]").waitFor();

  // The database's page: its window, and a restore in place after confirming by name.
  await page.goto(`${API}/console/#/databases/ledger`);
  const until = page.locator("[data-restorable-until]");
  await until.waitFor();
  assert.ok(Date.parse(await until.getAttribute("data-restorable-until")) >= then);
  assert.ok(Date.parse(await page.locator("[data-restorable-from]").getAttribute("data-restorable-from")) <= then);
  await page.getByLabel("Restore in place to (UTC)").fill(thenInput);
  await page.getByRole("button", { name: "Restore in place" }).click();
  const dialog = page.getByRole("dialog");
  const confirm = dialog.getByRole("button", { name: "Restore" });
  assert.equal(await confirm.isDisabled(), true);
  await dialog.getByLabel("Type ledger to confirm").fill("ledger");
  await confirm.click();
  await page.getByRole("status").filter({ hasText: "Database ledger restored to" }).waitFor();
  await shot(page, "restore");
  assert.deepEqual(await runSql(page, "ledger", "SELECT v FROM entries ORDER BY rowid"), ["old"]);
  // Recorded in the audit log, from the console.
  const { audit_logs: restores } = await admin("GET", "/v1/organizations/admin/audit-logs?code=db-restore&origin=web");
  assert.ok(restores.some((e) => e.message.includes("ledger")), JSON.stringify(restores));

  assert.deepEqual(problems, []);
  await context.close();
});

test("every section renders for the owner, with labels and no script error", async () => {
  const { context, page, problems } = await newPage();
  await logIn(page, "admin", PASSWORD);
  // On a fresh load, the keyboard's first stop is the link past the header and navigation.
  await page.reload();
  await page.getByRole("heading", { name: "Databases", level: 1 }).waitFor();
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.textContent), "Skip to content");
  for (const path of ["#/databases", "#/databases/shop", "#/sql/shop"]) {
    await page.goto(`${API}/console/${path}`);
    await page.locator("main h1").waitFor();
    await page.locator("main").getByText("Loading…").first().waitFor({ state: "detached" }).catch(() => {});
    assert.deepEqual(await unlabelled(page), [], `${path}: controls without a label`);
  }
  for (const [link, heading] of [
    ["Groups", "Groups"], ["Members", "Members"], ["Audit log", "Audit log"],
    ["Organizations", "Organizations"], ["Usage", "Usage"], ["API tokens", "API tokens"],
  ]) {
    await page.getByRole("navigation").getByRole("link", { name: link }).click();
    await page.getByRole("heading", { name: heading, level: 1 }).waitFor();
    assert.equal(await page.getByRole("link", { name: link }).getAttribute("aria-current"), "page");
    assert.equal(await page.locator("main .error").count(), 0, `${link}: ${await page.locator("main .error").allTextContents()}`);
    assert.deepEqual(await unlabelled(page), [], `${link}: controls without a label`);
    await shot(page, heading.toLowerCase().replace(/ /g, "-"));
  }
  // The audit log has this session's changes, with the console as their origin; the
  // filter is the server's: the request carries it and the total counts the matches.
  await page.getByRole("navigation").getByRole("link", { name: "Audit log" }).click();
  const total = page.locator("[data-total]");
  await total.waitFor();
  const everything = Number(await total.getAttribute("data-total"));
  const asked = page.waitForRequest((r) => r.url().includes("/audit-logs?") && new URL(r.url()).searchParams.get("code") === "db-create");
  await page.getByLabel("Code").fill("db-create");
  await asked;
  await page.getByText(/matching entries/).waitFor();
  const matching = Number(await total.getAttribute("data-total"));
  const { pagination } = await admin("GET", "/v1/organizations/admin/audit-logs?code=db-create");
  assert.equal(matching, pagination.total_rows);
  assert.ok(matching >= 2 && matching < everything, `${matching} of ${everything}`);
  const rows = page.getByRole("table", { name: "Audit log entries" }).locator("tbody tr");
  assert.equal(await rows.count(), matching);
  assert.deepEqual([...new Set(await rows.locator("td:nth-child(2)").allTextContents())], ["db-create"]);
  assert.deepEqual([...new Set(await rows.locator("td:nth-child(5)").allTextContents())], ["web"]);
  // Narrower still: by origin as well, and a time range that ends before everything.
  await page.getByLabel("Origin").selectOption("cli");
  await page.getByText("No entries match.").waitFor();
  await page.getByLabel("Origin").selectOption("");
  await page.getByLabel("Until (UTC)").fill("2020-01-01T00:00:00");
  await page.getByText("No entries match.").waitFor();
  await page.getByLabel("Until (UTC)").fill("");
  await page.getByText(`(${matching} matching entries)`).waitFor();
  await shot(page, "audit-log-filtered");
  // A group: add a location, see it, open its configuration.
  await page.getByRole("navigation").getByRole("link", { name: "Groups" }).click();
  await page.getByLabel("Add a location").selectOption("aws-eu-west-1");
  await page.getByRole("button", { name: "Add", exact: true }).click();
  await page.getByRole("button", { name: "Remove aws-eu-west-1" }).waitFor();
  await page.getByText("Configuration and tokens").click();
  await page.getByRole("checkbox", { name: "Delete protection" }).waitFor();
  assert.deepEqual(problems, []);
  await context.close();
});

test("create a team organization, add a member, change their role, invite by email", async () => {
  await admin("POST", "/v1/admin/users", { username: "walt", password: "walt-password-1234", email: "walt@example.com" });
  const { context, page, problems } = await newPage();
  await logIn(page, "admin", PASSWORD);
  await page.getByRole("navigation").getByRole("link", { name: "Organizations" }).click();
  await page.getByLabel("Name", { exact: true }).fill("Initech");
  await page.getByRole("button", { name: "Create organization" }).click();
  // The new organization becomes the current one.
  await page.getByRole("status").filter({ hasText: "Organization Initech created." }).waitFor();
  // The switch follows the message (it reloads the organizations first).
  await page.waitForFunction(() => [...document.querySelectorAll("#org-select")].some((s) => s.value === "initech"));
  assert.equal(await page.getByLabel("Organization", { exact: true }).inputValue(), "initech");

  await page.getByRole("navigation").getByRole("link", { name: "Members" }).click();
  await page.getByLabel("Username").fill("walt");
  await page.getByRole("button", { name: "Add member" }).click();
  const role = page.getByLabel("Role of walt");
  await role.waitFor();
  assert.equal(await role.inputValue(), "member");
  await role.selectOption("viewer");
  await page.getByRole("status").filter({ hasText: "walt is now viewer." }).waitFor();
  const { member } = await admin("GET", "/v1/organizations/initech/members/walt");
  assert.equal(member.role, "viewer");

  await page.getByLabel("Email").fill("erin@example.com");
  await page.getByRole("button", { name: "Invite", exact: true }).click();
  await page.getByRole("button", { name: "Cancel invite for erin@example.com" }).waitFor();
  await shot(page, "members-team");
  assert.deepEqual(problems, []);
  await context.close();
});

test("log out ends the session", async () => {
  const { context, page, problems } = await newPage();
  await logIn(page, "admin", PASSWORD);
  const [before] = (await context.cookies()).filter((c) => c.name === "atoll_session");
  await page.getByRole("button", { name: "Log out" }).click();
  await page.getByRole("heading", { name: "Log in to Atoll" }).waitFor();
  assert.equal((await context.cookies()).filter((c) => c.name === "atoll_session").length, 0);
  // The login token the cookie held is revoked, not merely forgotten.
  const check = await fetch(`${API}/v1/user`, { headers: { Authorization: `Bearer ${before.value}` } });
  assert.equal(check.status, 401);
  assert.deepEqual(problems, []);
  await context.close();
});
