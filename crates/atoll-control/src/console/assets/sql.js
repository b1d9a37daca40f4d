// The SQL editor: statements run on the data plane (Hrana over HTTP) with a database
// token of a few minutes, minted through the API like any client's; results as tables;
// a history kept in this browser's localStorage.

import { get, post, orgPath, runStatements, fromValue, listDatabases } from "./api.js";
import { h, mount, field, select, errorBox, checkbox, table, actionButton } from "./ui.js";
import { session } from "./app.js";

const enc = encodeURIComponent;
const TOKEN_LIFETIME = "10m";
const TOKEN_REUSE_MS = 8 * 60 * 1000;
const HISTORY_SIZE = 50;

/** Short-lived tokens, per organization/database/mode, kept in memory only. */
const tokens = new Map();
/**
 * Keys of encrypted databases, per organization/database, typed by the user: kept in this
 * page's memory only (never in localStorage, never sent to the API), gone on reload.
 */
const encryptionKeys = new Map();

async function databaseToken(org, name, readOnly) {
  const key = `${org}/${name}/${readOnly}`;
  const cached = tokens.get(key);
  if (cached && Date.now() - cached.at < TOKEN_REUSE_MS) return cached;
  const params = new URLSearchParams({ expiration: TOKEN_LIFETIME });
  if (readOnly) params.set("authorization", "read-only");
  const base = orgPath(org, `/databases/${enc(name)}`);
  const [{ jwt }, { database }] = await Promise.all([
    post(`${base}/auth/tokens?${params}`),
    get(base),
  ]);
  const entry = { jwt, url: database.http_url, at: Date.now() };
  tokens.set(key, entry);
  return entry;
}

const historyKey = (org, name) => `atoll.sql.history.${org}/${name}`;

function loadHistory(org, name) {
  try {
    return JSON.parse(localStorage.getItem(historyKey(org, name)) || "[]");
  } catch {
    return [];
  }
}

function remember(org, name, sql) {
  const history = loadHistory(org, name).filter((s) => s !== sql);
  history.unshift(sql);
  localStorage.setItem(historyKey(org, name), JSON.stringify(history.slice(0, HISTORY_SIZE)));
}

/**
 * Splits SQL text into statements at semicolons outside quotes and comments. A trigger
 * body (`BEGIN … END`) keeps its inner semicolons.
 */
export function splitStatements(text) {
  const statements = [];
  let current = "";
  let depth = 0;
  let i = 0;
  const push = () => {
    const s = current.trim();
    if (s) statements.push(s);
    current = "";
  };
  while (i < text.length) {
    const c = text[i];
    const rest = text.slice(i);
    if (c === "'" || c === '"' || c === "`" || c === "[") {
      const close = c === "[" ? "]" : c;
      let j = i + 1;
      while (j < text.length) {
        if (text[j] === close) {
          if (close !== "]" && text[j + 1] === close) { j += 2; continue; }
          break;
        }
        j += 1;
      }
      current += text.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    if (rest.startsWith("--")) {
      const end = text.indexOf("\n", i);
      i = end === -1 ? text.length : end + 1;
      current += " ";
      continue;
    }
    if (rest.startsWith("/*")) {
      const end = text.indexOf("*/", i + 2);
      i = end === -1 ? text.length : end + 2;
      current += " ";
      continue;
    }
    const word = /^[A-Za-z_]+/.exec(rest);
    if (word && !/[A-Za-z0-9_]/.test(text[i - 1] || "")) {
      const w = word[0].toUpperCase();
      // BEGIN opens a trigger body only after CREATE TRIGGER; a bare BEGIN is a transaction.
      if (w === "BEGIN" && /\bTRIGGER\b/i.test(current)) depth += 1;
      if (w === "END" && depth > 0) depth -= 1;
      current += word[0];
      i += word[0].length;
      continue;
    }
    if (c === ";" && depth === 0) {
      push();
      i += 1;
      continue;
    }
    current += c;
    i += 1;
  }
  push();
  return statements;
}

function resultView(outcome) {
  if (outcome.skipped) return h("p", { class: "muted" }, "Not run: an earlier statement failed.");
  if (!outcome.ok) {
    return h("div", { class: "error", role: "alert" },
      h("strong", {}, "Error: "), outcome.error.message, outcome.error.code ? ` (${outcome.error.code})` : "");
  }
  const r = outcome.result;
  const summary = h("p", { class: "muted" },
    r.cols.length
      ? `${r.rows.length} row${r.rows.length === 1 ? "" : "s"}`
      : `${r.affected_row_count} row${r.affected_row_count === 1 ? "" : "s"} changed`,
    r.last_insert_rowid && !r.cols.length ? `, last rowid ${r.last_insert_rowid}` : "");
  if (!r.cols.length) return summary;
  const columns = r.cols.map((col, index) => [col.name || `column ${index + 1}`, (row) => {
    const v = fromValue(row[index]);
    return v === null ? h("span", { class: "null" }, "NULL") : v;
  }]);
  return h("div", {}, summary, table(columns, r.rows, { caption: "Query result", empty: "No rows." }));
}

export async function sqlPage(name) {
  const org = session.org.slug;
  if (!session.atLeast("member")) {
    return h("section", {}, h("h1", { id: "page-title" }, "SQL editor"),
      h("p", { class: "muted role-note" }, `The SQL editor runs with a database token, which needs the member role (yours: ${session.role}).`));
  }
  const databases = await listDatabases(org);
  if (!databases.length) {
    return h("section", {}, h("h1", {}, "SQL editor"), h("p", {}, "No databases yet: ", h("a", { href: "#/databases" }, "create one"), "."));
  }
  const current = name && databases.some((d) => d.Name === name) ? name : databases[0].Name;
  const which = select(databases.map((d) => [d.Name, d.Name]), { name: "database" });
  which.value = current;
  which.addEventListener("change", () => { location.hash = `#/sql/${enc(which.value)}`; });
  const editor = h("textarea", { name: "sql", rows: 8, spellcheck: "false", autocapitalize: "off", class: "sql" });
  editor.value = loadHistory(org, current)[0] || "SELECT name, type FROM sqlite_schema;";
  const readOnly = checkbox("Read-only token");
  const keyId = `${org}/${current}`;
  const encryptionKey = h("input", {
    type: "password", name: "encryption_key", autocomplete: "off", spellcheck: "false",
    placeholder: "only for a database created with one",
  });
  encryptionKey.value = encryptionKeys.get(keyId) || "";
  const results = h("div", { class: "results", "aria-live": "polite" });
  const historyList = h("ol", { class: "history" });

  const drawHistory = () => mount(historyList, loadHistory(org, current).map((sql) =>
    h("li", {}, h("button", { type: "button", class: "link", onclick: () => { editor.value = sql; editor.focus(); } }, sql))));

  const run = async () => {
    const statements = splitStatements(editor.value);
    if (!statements.length) {
      mount(results, errorBox(new Error("write a statement first")));
      return;
    }
    mount(results, h("p", { class: "muted" }, "Running…"));
    try {
      const token = await databaseToken(org, current, readOnly.input.checked);
      const key = encryptionKey.value.trim();
      if (key) encryptionKeys.set(keyId, key); else encryptionKeys.delete(keyId);
      const outcomes = await runStatements(token.url, token.jwt, statements, key || undefined);
      // An encrypted database's statements are its data: not kept in this browser.
      if (!key) remember(org, current, editor.value.trim());
      drawHistory();
      mount(results, outcomes.map((o, i) => h("div", { class: "outcome" },
        statements.length > 1 ? h("h3", {}, `Statement ${i + 1}`, h("code", {}, ` ${o.sql.slice(0, 80)}`)) : null,
        resultView(o))));
    } catch (e) {
      mount(results, errorBox(e));
    }
  };
  editor.addEventListener("keydown", (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key === "Enter") {
      e.preventDefault();
      run();
    }
  });
  drawHistory();
  return h("section", { "aria-labelledby": "page-title" },
    h("h1", { id: "page-title" }, `SQL editor: ${current}`),
    h("div", { class: "row" }, field("Database", which), readOnly.el),
    field("Encryption key", encryptionKey,
      "For a database encrypted with its own key: sent with each query, kept in this page's memory only; its statements stay out of the history."),
    field("SQL", editor, "Ctrl+Enter (⌘+Enter) runs it. Several statements run in order, stopping at the first error."),
    h("div", { class: "actions" }, actionButton("Run", run, { class: "primary", id: "run-sql" })),
    results,
    h("div", { class: "card" }, h("h2", {}, "History"), h("p", { class: "muted" }, "Kept in this browser only."),
      historyList,
      actionButton("Clear history", async () => {
        localStorage.removeItem(historyKey(org, current));
        drawHistory();
      }, { class: "small" })));
}
