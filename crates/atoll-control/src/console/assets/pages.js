// The console's pages. Each answers a DOM node; each calls only the public API.

import { get, post, patch, del, orgPath, uploadFile, listDatabases } from "./api.js";
import {
  h, mount, field, checkbox, select, table, toast, errorBox, confirmDialog, secretBox,
  formatBytes, formatNumber, formatDate, actionButton, form,
} from "./ui.js";
import { lineChart, quotaBars } from "./charts.js";
import { session, refresh, refreshOrgs } from "./app.js";

const org = () => session.org.slug;
const enc = encodeURIComponent;

/** Most databases the usage chart sums over (one usage question per database and day). */
const ALL_DATABASES_CHART_LIMIT = 20;

const EXPIRATIONS = [["1h", "1 hour"], ["1d", "1 day"], ["7d", "7 days"], ["30d", "30 days"], ["never", "Never"]];

function page(title, ...children) {
  return h("section", { "aria-labelledby": "page-title" }, h("h1", { id: "page-title" }, title), ...children);
}

function roleNote(needed) {
  return h("p", { class: "muted role-note" }, `Your role (${session.role}) can see this; changing it needs the ${needed} role.`);
}

// ---------------------------------------------------------------------------------------
// Databases

export async function databasesPage() {
  const [{ databases }, { groups }] = await Promise.all([
    listDatabases(org()).then((databases) => ({ databases })),
    get(orgPath(org(), "/groups")),
  ]);
  const canChange = session.atLeast("member");
  const list = table([
    ["Name", (d) => h("a", { href: `#/databases/${enc(d.Name)}` }, d.Name)],
    ["Group", (d) => d.group],
    ["Location", (d) => d.primaryRegion],
    ["State", (d) => (d.archived ? "archived" : d.state || "ready")],
    ["URL", (d) => h("code", {}, d.http_url)],
  ], databases, { caption: "Databases of this organization", empty: "No databases yet." });

  return page("Databases",
    list,
    canChange ? createDatabaseForm(groups, databases) : roleNote("member"),
    await deletedDatabases(canChange));
}

function createDatabaseForm(groups, databases) {
  const name = h("input", { name: "name", required: true, autocomplete: "off" });
  const group = select(groups.map((g) => [g.name, `${g.name} (${g.primary})`]), { name: "group" });
  const source = select([
    ["empty", "Empty"],
    ["upload", "Upload a SQLite file"],
    ["copy", "Copy of another database"],
  ], { name: "source" });
  const file = h("input", { type: "file", name: "file", accept: ".db,.sqlite,.sqlite3,application/octet-stream,application/vnd.sqlite3" });
  const from = select(databases.map((d) => [d.Name, d.Name]), { name: "from" });
  const timestamp = h("input", { type: "datetime-local", name: "timestamp", step: 1 });
  const sizeLimit = h("input", { name: "size_limit", placeholder: "e.g. 256mb", autocomplete: "off" });
  const progress = h("progress", { max: 1, value: 0, hidden: true, "aria-label": "Upload progress" });
  const progressText = h("span", { class: "muted", "aria-live": "polite" });
  const uploadField = field("SQLite file", file, "WAL mode, checkpointed, page size 4096 (the server checks the file).");
  const copyFields = h("div", {},
    field("Copy from", from),
    field("As of (point in time, UTC)", timestamp,
      "Optional. Point-in-time restore answers once the server's storage layer offers it; until then the server says it is not available."));
  const sync = () => {
    uploadField.hidden = source.value !== "upload";
    copyFields.hidden = source.value !== "copy";
  };
  source.addEventListener("change", sync);
  sync();

  return form({ class: "card", "aria-labelledby": "create-db" }, [
    h("h2", { id: "create-db" }, "Create a database"),
    h("div", { class: "row" }, field("Name", name), field("Group", group), field("Source", source)),
    uploadField,
    copyFields,
    field("Size limit", sizeLimit, "Optional."),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Create database"), progress, progressText),
  ], async () => {
    const body = { name: name.value.trim(), group: group.value };
    if (sizeLimit.value.trim()) body.size_limit = sizeLimit.value.trim();
    if (source.value === "upload") {
      if (!file.files.length) throw new Error("choose a SQLite file to upload");
      body.seed = { type: "database_upload" };
    } else if (source.value === "copy") {
      body.seed = { type: "database", name: from.value };
      if (timestamp.value) body.seed.timestamp = new Date(`${timestamp.value}Z`).toISOString();
    }
    await post(orgPath(org(), "/databases"), body);
    if (source.value === "upload") {
      progress.hidden = false;
      try {
        const { database } = await get(orgPath(org(), `/databases/${enc(body.name)}`));
        const { jwt } = await post(orgPath(org(), `/databases/${enc(body.name)}/auth/tokens?expiration=1h`));
        await uploadFile(database.http_url, jwt, file.files[0], (share) => {
          progress.value = share;
          progressText.textContent = `${Math.round(share * 100)}%`;
        });
      } catch (e) {
        // Like `atoll db import`: a failed upload leaves no half-made database behind.
        await del(orgPath(org(), `/databases/${enc(body.name)}`)).catch(() => {});
        throw e;
      }
    }
    toast(`Database ${body.name} created.`);
    location.hash = `#/databases/${enc(body.name)}`;
  });
}

async function deletedDatabases(canChange) {
  let deleted;
  try {
    ({ databases: deleted } = await get(orgPath(org(), "/deleted-databases")));
  } catch (e) {
    return h("div", { class: "card" }, h("h2", {}, "Deleted databases"), errorBox(e));
  }
  const plan = session.org.plan_id;
  return h("div", { class: "card" },
    h("h2", {}, "Deleted databases"),
    table([
      ["Name", (d) => d.Name],
      ["Group", (d) => d.group],
      ["Deleted", (d) => formatDate(d.deleted_at)],
      ["Restorable until", (d) => formatDate(d.restorable_until)],
      ["", (d) => (canChange ? actionButton("Restore", async () => {
        await post(orgPath(org(), `/deleted-databases/${enc(d.DbId)}/restore`));
        toast(`Database ${d.Name} restored.`);
        refresh();
      }) : "")],
    ], deleted, {
      empty: plan === "starter"
        ? "On the free plan a deleted database is gone for good; paid plans keep them restorable for 5 days."
        : "No deleted databases to restore.",
    }));
}

export async function databasePage(name) {
  const base = orgPath(org(), `/databases/${enc(name)}`);
  const [{ database }, { config }] = await Promise.all([
    get(base),
    get(`${base}/configuration`).then((c) => ({ config: c })),
  ]);
  const canChange = session.atLeast("member");
  const info = h("dl", { class: "facts" },
    h("dt", {}, "Group"), h("dd", {}, database.group),
    h("dt", {}, "Location"), h("dd", {}, database.primaryRegion),
    h("dt", {}, "URL for clients"), h("dd", {}, h("code", {}, database.http_url)),
    h("dt", {}, "Hostname"), h("dd", {}, h("code", {}, database.Hostname)),
    h("dt", {}, "Id"), h("dd", {}, h("code", {}, database.DbId)));

  const chart = h("div", {}, h("p", { class: "muted" }, "Loading usage…"));
  dailyUsage([name], 14).then((series) => mount(chart, series)).catch((e) => mount(chart, errorBox(e)));

  return page(`Database ${name}`,
    h("p", {}, h("a", { href: "#/databases" }, "← All databases"),
      session.atLeast("member") ? [" · ", h("a", { href: `#/sql/${enc(name)}` }, "Open in the SQL editor")] : null),
    info,
    h("div", { class: "card" }, h("h2", {}, "Usage, last 14 days"), chart),
    configurationForm(`${base}/configuration`, config, canChange, [
      ["block_reads", "Block reads"],
      ["block_writes", "Block writes"],
      ["allow_attach", "Allow ATTACH of this database by tokens of others"],
      ["delete_protection", "Delete protection"],
    ], true),
    canChange ? tokenCard("Database tokens", `${base}/auth`, "database") : roleNote("member"),
    canChange ? pointInTimeCard(name) : null,
    canChange ? destroyCard(name, base) : null);
}

/** Where point-in-time restore goes: a copy of this database as of a time, via the create route. */
function pointInTimeCard(name) {
  return h("div", { class: "card" },
    h("h2", {}, "Restore to a point in time"),
    h("p", { class: "muted" },
      "Create a new database as a copy of ", h("strong", {}, name),
      " as of a time, from the databases page (Source: copy, with a time). The server answers once its storage layer keeps history."));
}

function destroyCard(name, base) {
  return h("div", { class: "card danger-zone" },
    h("h2", {}, "Destroy"),
    h("p", {}, "Destroying a database stops every client at once. Paid plans can restore it for 5 days."),
    actionButton(`Destroy ${name}`, async () => {
      const ok = await confirmDialog({
        title: `Destroy ${name}?`,
        message: "Its data goes with it (paid plans: restorable for 5 days).",
        action: "Destroy",
        danger: true,
        typeToConfirm: name,
      });
      if (!ok) return;
      await del(base);
      toast(`Database ${name} destroyed.`);
      location.hash = "#/databases";
    }, { class: "danger" }));
}

function configurationForm(path, config, canChange, flags, withSizeLimit) {
  const boxes = flags.map(([key, label]) => {
    const box = checkbox(label, { name: key, checked: !!config[key], disabled: !canChange });
    return [key, box];
  });
  const sizeLimit = withSizeLimit
    ? h("input", { name: "size_limit", value: config.size_limit || "", disabled: !canChange, placeholder: "none" })
    : null;
  const children = [
    h("h2", {}, "Configuration"),
    boxes.map(([, b]) => b.el),
    sizeLimit ? field("Size limit", sizeLimit, "Empty: no limit.") : null,
    canChange ? h("button", { type: "submit", class: "primary" }, "Save configuration") : null,
  ];
  return form({ class: "card" }, children, async () => {
    const body = {};
    for (const [key, box] of boxes) body[key] = box.input.checked;
    if (sizeLimit) body.size_limit = sizeLimit.value.trim();
    await patch(path, body);
    toast("Configuration saved.");
  });
}

/** Mint (with expiry and read-only) and rotate tokens of a database or a group. */
function tokenCard(title, authBase, what) {
  const expiration = select(EXPIRATIONS, { name: "expiration" });
  expiration.value = "7d";
  const readOnly = checkbox("Read-only");
  const shown = h("div", {});
  const mint = form({ class: "inline" }, [
    field("Expires after", expiration),
    readOnly.el,
    h("button", { type: "submit" }, "Create token"),
  ], async () => {
    const params = new URLSearchParams({ expiration: expiration.value });
    if (readOnly.input.checked) params.set("authorization", "read-only");
    const { jwt } = await post(`${authBase}/tokens?${params}`);
    mount(shown, secretBox(`New ${readOnly.input.checked ? "read-only " : ""}${what} token`, jwt));
  });
  const rotate = actionButton("Invalidate all tokens", async () => {
    const ok = await confirmDialog({
      title: "Invalidate every token?",
      message: `Every token of this ${what} stops working at once (its signing key is rotated).`,
      action: "Invalidate",
      danger: true,
    });
    if (!ok) return;
    await post(`${authBase}/rotate`);
    mount(shown);
    toast("Every token was invalidated.");
  }, { class: "danger" });
  return h("div", { class: "card" }, h("h2", {}, title), mint, shown, h("div", { class: "actions" }, rotate));
}

// ---------------------------------------------------------------------------------------
// Groups

export async function groupsPage() {
  const [{ groups }, { locations }] = await Promise.all([
    get(orgPath(org(), "/groups")),
    get("/v1/locations"),
  ]);
  const canChange = session.atLeast("member");
  const locationOptions = Object.entries(locations).map(([code, description]) => [code, `${code} — ${description}`]);
  const cards = groups.map((g) => groupCard(g, locationOptions, canChange));
  const name = h("input", { name: "name", required: true, autocomplete: "off" });
  const location = select(locationOptions, { name: "location" });
  const create = canChange ? form({ class: "card" }, [
    h("h2", {}, "Create a group"),
    h("div", { class: "row" }, field("Name", name), field("Location", location)),
    h("button", { type: "submit", class: "primary" }, "Create group"),
  ], async () => {
    await post(orgPath(org(), "/groups"), { name: name.value.trim(), location: location.value });
    toast(`Group ${name.value} created.`);
    refresh();
  }) : roleNote("member");
  return page("Groups", cards.length ? cards : h("p", { class: "muted" }, "No groups yet."), create);
}

function groupCard(g, locationOptions, canChange) {
  const base = orgPath(org(), `/groups/${enc(g.name)}`);
  const addLocation = select(locationOptions.filter(([code]) => !g.locations.includes(code)), { name: "location" });
  const details = h("details", {},
    h("summary", {}, "Configuration and tokens"),
    h("div", { class: "details-body" }, h("p", { class: "muted" }, "Loading…")));
  details.addEventListener("toggle", async () => {
    if (!details.open || details.dataset.loaded) return;
    details.dataset.loaded = "1";
    const body = details.querySelector(".details-body");
    try {
      const config = await get(`${base}/configuration`);
      mount(body,
        configurationForm(`${base}/configuration`, config, canChange, [["delete_protection", "Delete protection"]], false),
        canChange ? tokenCard("Group tokens", `${base}/auth`, "group") : null);
    } catch (e) {
      mount(body, errorBox(e));
    }
  });
  return h("article", { class: "card group", "aria-labelledby": `group-${g.name}` },
    h("h2", { id: `group-${g.name}` }, g.name, g.archived ? h("span", { class: "badge warn" }, "archived") : null),
    h("p", {}, "Locations: ",
      g.locations.map((loc, i) => [i ? ", " : "", loc, loc === g.primary ? " (primary)" : "",
        canChange && loc !== g.primary ? [" ", actionButton(`Remove ${loc}`, async () => {
          await del(`${base}/locations/${enc(loc)}`);
          toast(`Location ${loc} removed.`);
          refresh();
        }, { class: "small" })] : null])),
    g.archived ? h("p", {}, "Archived for inactivity: its databases refuse queries until it is unarchived. ",
      canChange ? actionButton("Unarchive", async () => {
        await post(`${base}/unarchive`);
        toast(`Group ${g.name} unarchived.`);
        refresh();
      }) : null) : null,
    canChange && addLocation.options.length ? form({ class: "inline" }, [
      field("Add a location", addLocation),
      h("button", { type: "submit" }, "Add"),
    ], async () => {
      await post(`${base}/locations/${enc(addLocation.value)}`);
      toast(`Location ${addLocation.value} added.`);
      refresh();
    }) : null,
    details,
    canChange ? h("div", { class: "actions" }, actionButton(`Delete group ${g.name}`, async () => {
      const ok = await confirmDialog({
        title: `Delete group ${g.name}?`,
        message: "Its databases and tokens are deleted with it.",
        action: "Delete",
        danger: true,
        typeToConfirm: g.name,
      });
      if (!ok) return;
      await del(base);
      toast(`Group ${g.name} deleted.`);
      refresh();
    }, { class: "danger" })) : null);
}

// ---------------------------------------------------------------------------------------
// Usage

function utcDay(d) {
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()));
}

/**
 * Rows read and written per day over the last `days` days (UTC), summed over `names`:
 * one usage question per database and day (the API keeps hourly buckets and answers any
 * period).
 */
async function dailyUsage(names, days) {
  const today = utcDay(new Date());
  const starts = Array.from({ length: days }, (_, i) => new Date(today.getTime() - (days - 1 - i) * 86400000));
  const read = new Array(days).fill(0);
  const written = new Array(days).fill(0);
  const questions = names.flatMap((name) => starts.map((start, i) => async () => {
    const end = new Date(start.getTime() + 86400000);
    const q = new URLSearchParams({ from: start.toISOString(), to: end.toISOString() });
    const { database } = await get(orgPath(org(), `/databases/${enc(name)}/usage?${q}`));
    read[i] += database.usage.rows_read;
    written[i] += database.usage.rows_written;
  }));
  // A few at a time: each question makes the server collect from its nodes first.
  const workers = Array.from({ length: Math.min(6, questions.length) }, async () => {
    while (questions.length) await questions.shift()();
  });
  await Promise.all(workers);
  const labels = starts.map((d) => `${d.getUTCMonth() + 1}/${d.getUTCDate()}`);
  return lineChart({
    title: `Rows read and written per day (UTC), ${names.length === 1 ? names[0] : `${names.length} databases`}`,
    labels,
    series: [{ name: "Rows read", values: read }, { name: "Rows written", values: written }],
  });
}

export async function usagePage() {
  const { organization } = await get(orgPath(org(), "/usage"));
  const { usage, quotas } = organization;
  const databases = await listDatabases(org());
  const nameOf = new Map(databases.map((d) => [d.DbId, d.Name]));
  const bars = quotaBars({
    title: `This billing cycle on the ${organization.plan} plan (${formatDate(organization.from)} to ${formatDate(organization.to)})`,
    items: [
      { label: "Rows read", used: usage.rows_read, quota: quotas.rows_read, format: formatNumber },
      { label: "Rows written", used: usage.rows_written, quota: quotas.rows_written, format: formatNumber },
      { label: "Storage", used: usage.storage_bytes, quota: quotas.storage_bytes, format: formatBytes },
      { label: "Databases", used: usage.databases, quota: quotas.databases, format: formatNumber },
      { label: "Groups", used: usage.groups, quota: quotas.groups, format: formatNumber },
      { label: "Locations", used: usage.locations, quota: quotas.locations, format: formatNumber },
    ],
  });
  const perDatabase = table([
    ["Database", (d) => nameOf.get(d.uuid) || h("span", { class: "muted" }, `${d.uuid} (deleted)`)],
    ["Rows read", (d) => formatNumber(d.usage.rows_read)],
    ["Rows written", (d) => formatNumber(d.usage.rows_written)],
    ["Storage", (d) => formatBytes(d.usage.storage_bytes)],
  ], organization.databases || [], { caption: "By database, this billing cycle" });
  const storageBars = quotaBars({
    title: "Storage per database against the plan's storage quota",
    items: (organization.databases || []).filter((d) => nameOf.has(d.uuid)).map((d) => ({
      label: nameOf.get(d.uuid), used: d.usage.storage_bytes, quota: quotas.storage_bytes, format: formatBytes,
    })),
  });

  const chartBox = h("div", {});
  // Summing every database costs one question per database and day: offered up to 20.
  const summable = databases.length <= ALL_DATABASES_CHART_LIMIT;
  const choices = [
    ...(summable ? [["", `All databases (${databases.length})`]] : []),
    ...databases.map((d) => [d.Name, d.Name]),
  ];
  const which = select(choices, { name: "database" });
  const days = select([["7", "7 days"], ["14", "14 days"], ["30", "30 days"]], { name: "days" });
  days.value = "14";
  const draw = async () => {
    mount(chartBox, h("p", { class: "muted" }, "Loading…"));
    const names = which.value ? [which.value] : databases.map((d) => d.Name);
    try {
      mount(chartBox, names.length ? await dailyUsage(names, Number(days.value)) : h("p", { class: "muted" }, "No databases yet."));
    } catch (e) {
      mount(chartBox, errorBox(e));
    }
  };
  which.addEventListener("change", draw);
  days.addEventListener("change", draw);
  draw();

  return page("Usage",
    organization.blocked_reads || organization.blocked_writes ? errorBox(new Error("This organization is over its plan's quota: queries are blocked.")) : null,
    h("div", { class: "card" }, bars),
    h("div", { class: "card" },
      h("h2", {}, "Over time"),
      h("div", { class: "row" }, field("Database", which), field("Period", days)),
      chartBox,
      h("p", { class: "muted" }, "Storage is measured now, not kept as history: see the bars below.")),
    h("div", { class: "card" }, storageBars, perDatabase));
}

// ---------------------------------------------------------------------------------------
// API tokens

export async function tokensPage() {
  const { tokens } = await get("/v1/auth/api-tokens");
  const shown = h("div", {});
  const name = h("input", { name: "name", required: true, autocomplete: "off" });
  const scope = select([
    ["org", `This organization (${org()})`],
    ["user", "Every organization (unrestricted)"],
  ], { name: "scope" });
  const expiration = select(EXPIRATIONS, { name: "expiration" });
  expiration.value = "never";
  const mint = form({ class: "card" }, [
    h("h2", {}, "Mint a token"),
    h("div", { class: "row" }, field("Name", name), field("Acts on", scope), field("Expires after", expiration)),
    h("button", { type: "submit", class: "primary" }, "Mint token"),
  ], async () => {
    const body = {};
    if (scope.value === "org") body.organization = org();
    if (expiration.value !== "never") body.expiration = expiration.value;
    const minted = await post(`/v1/auth/api-tokens/${enc(name.value.trim())}`, body);
    mount(shown, secretBox(`API token ${minted.name}`, minted.token));
    name.value = "";
    const listing = await get("/v1/auth/api-tokens");
    mount(mine, tokenTable(listing.tokens));
  });
  const mine = h("div", {}, tokenTable(tokens));

  let orgTokens = null;
  if (session.atLeast("admin")) {
    try {
      const { tokens: all } = await get(orgPath(org(), "/api-tokens"));
      orgTokens = h("div", { class: "card" }, h("h2", {}, `Every token of ${org()}`),
        table([
          ["Name", (t) => t.name],
          ["Minted by", (t) => (t.owner ? t.owner.username : "—")],
          ["Group", (t) => t.group || "—"],
          ["Expires", (t) => formatDate(t.expires_at)],
          ["", (t) => actionButton(`Revoke ${t.name}`, async () => {
            await del(orgPath(org(), `/api-tokens/${enc(t.id)}`));
            toast(`Token ${t.name} revoked.`);
            refresh();
          }, { class: "danger small" })],
        ], all, { empty: "No organization tokens." }));
    } catch (e) {
      orgTokens = errorBox(e);
    }
  }
  return page("API tokens",
    h("p", {}, "Tokens for scripts and the SDK: ", h("code", {}, "Authorization: Bearer <token>"), "."),
    mint, shown,
    h("div", { class: "card" }, h("h2", {}, "Your tokens"), mine),
    orgTokens);
}

function tokenTable(tokens) {
  return table([
    ["Name", (t) => t.name],
    ["Organization", (t) => t.organization || "every"],
    ["Created", (t) => formatDate(t.created_at)],
    ["Last used", (t) => formatDate(t.last_used_at)],
    ["Expires", (t) => (t.expires_at ? formatDate(t.expires_at) : "never")],
    ["", (t) => actionButton(`Revoke ${t.name}`, async () => {
      const ok = await confirmDialog({ title: `Revoke ${t.name}?`, message: "Scripts using it stop working at once.", action: "Revoke", danger: true });
      if (!ok) return;
      await del(`/v1/auth/api-tokens/${enc(t.name)}`);
      toast(`Token ${t.name} revoked.`);
      refresh();
    }, { class: "danger small" })],
  ], tokens, { caption: "Your API tokens", empty: "You have no API tokens." });
}

// ---------------------------------------------------------------------------------------
// Members and invites

export async function membersPage() {
  const { members } = await get(orgPath(org(), "/members"));
  const isAdmin = session.atLeast("admin");
  const roles = [["viewer", "viewer"], ["member", "member"], ["admin", "admin"], ["owner", "owner"]];
  const list = table([
    ["Username", (m) => m.username],
    ["Email", (m) => m.email],
    ["Role", (m) => {
      if (!isAdmin || m.username === session.username) return m.role;
      const role = select(roles, { "aria-label": `Role of ${m.username}` });
      role.value = m.role;
      role.addEventListener("change", async () => {
        try {
          await patch(orgPath(org(), `/members/${enc(m.username)}`), { role: role.value });
          toast(`${m.username} is now ${role.value}.`);
        } catch (e) {
          role.value = m.role;
          toast(e.message, "error");
        }
      });
      return role;
    }],
    ["", (m) => (isAdmin && m.username !== session.username ? actionButton(`Remove ${m.username}`, async () => {
      const ok = await confirmDialog({ title: `Remove ${m.username}?`, message: "Their tokens for this organization are revoked.", action: "Remove", danger: true });
      if (!ok) return;
      await del(orgPath(org(), `/members/${enc(m.username)}`));
      toast(`${m.username} removed.`);
      refresh();
    }, { class: "danger small" }) : "")],
  ], members, { caption: `Members of ${session.org.name}` });

  const sections = [list];
  if (isAdmin && session.org.type !== "personal") {
    const username = h("input", { name: "username", required: true, autocomplete: "off" });
    const role = select(roles.slice(0, 3), { name: "role" });
    role.value = "member";
    sections.push(form({ class: "card" }, [
      h("h2", {}, "Add a member"),
      h("p", { class: "muted" }, "Members are existing users of this server."),
      h("div", { class: "row" }, field("Username", username), field("Role", role)),
      h("button", { type: "submit", class: "primary" }, "Add member"),
    ], async () => {
      await post(orgPath(org(), "/members"), { username: username.value.trim(), role: role.value });
      toast(`${username.value} added.`);
      refresh();
    }));
    const { invites } = await get(`/v2/organizations/${enc(org())}/invites`);
    const email = h("input", { name: "email", type: "email", required: true, autocomplete: "off" });
    const inviteRole = select(roles.slice(0, 3), { name: "role" });
    sections.push(h("div", { class: "card" },
      h("h2", {}, "Invites"),
      table([
        ["Email", (i) => i.email],
        ["Username", (i) => i.username || "—"],
        ["Role", (i) => i.role],
        ["Sent", (i) => formatDate(i.created_at)],
        ["", (i) => actionButton(`Cancel invite for ${i.email || i.username}`, async () => {
          await del(`/v2/organizations/${enc(org())}/invites/${enc(i.email || i.username)}`);
          toast("Invite cancelled.");
          refresh();
        }, { class: "small" })],
      ], invites, { empty: "No pending invites." }),
      form({ class: "inline" }, [
        field("Email", email),
        field("Role", inviteRole),
        h("button", { type: "submit" }, "Invite"),
      ], async () => {
        await post(`/v2/organizations/${enc(org())}/invites`, { email: email.value.trim(), role: inviteRole.value });
        toast(`Invited ${email.value}.`);
        refresh();
      })));
  } else if (!isAdmin) {
    sections.push(roleNote("admin"));
  } else {
    sections.push(h("p", { class: "muted" }, "A personal organization has no other members: create a team organization to invite people."));
  }
  return page("Members", ...sections);
}

// ---------------------------------------------------------------------------------------
// Audit log

export async function auditPage() {
  if (!session.atLeast("admin")) return page("Audit log", roleNote("admin"));
  const state = { page: 1 };
  const box = h("div", {});
  const code = h("input", { name: "code", placeholder: "e.g. db-create", autocomplete: "off", list: "audit-codes" });
  const author = h("input", { name: "author", autocomplete: "off" });
  const origin = select([["", "any"], ["web", "web"], ["cli", "cli"], ["api", "api"]], { name: "origin" });
  const codes = h("datalist", { id: "audit-codes" });
  let entries = [];
  let pagination = null;
  const render = () => {
    const shown = entries.filter((e) => (!code.value || e.code.includes(code.value.trim()))
      && (!author.value || e.author.includes(author.value.trim()))
      && (!origin.value || e.origin === origin.value));
    mount(box,
      table([
        ["When", (e) => formatDate(e.created_at)],
        ["Code", (e) => h("code", {}, e.code)],
        ["Message", (e) => e.message],
        ["Author", (e) => e.author],
        ["Origin", (e) => e.origin],
      ], shown, { caption: "Audit log entries", empty: "No entries match." }),
      h("div", { class: "actions" },
        h("span", { class: "muted" }, `Page ${pagination.page} of ${Math.max(1, pagination.total_pages)} (${pagination.total_rows} entries; filters apply to this page)`),
        state.page > 1 ? actionButton("Newer", async () => { state.page -= 1; await load(); }) : null,
        state.page < pagination.total_pages ? actionButton("Older", async () => { state.page += 1; await load(); }) : null));
  };
  const load = async () => {
    const q = new URLSearchParams({ page: state.page, page_size: 100 });
    const answer = await get(orgPath(org(), `/audit-logs?${q}`));
    entries = answer.audit_logs;
    pagination = answer.pagination;
    mount(codes, [...new Set(entries.map((e) => e.code))].map((c) => h("option", { value: c })));
    render();
  };
  for (const input of [code, author, origin]) input.addEventListener("input", render);
  try {
    await load();
  } catch (e) {
    mount(box, errorBox(e));
  }
  return page("Audit log",
    h("div", { class: "row filters" }, field("Code", code), field("Author", author), field("Origin", origin), codes),
    box);
}

// ---------------------------------------------------------------------------------------
// Organizations

export async function organizationsPage() {
  const organizations = await get("/v1/organizations");
  let invites = [];
  try {
    ({ invites } = await get("/v1/user/invites"));
  } catch { /* a login always may; keep the page when it cannot */ }
  const name = h("input", { name: "name", required: true, autocomplete: "off" });
  return page("Organizations",
    table([
      ["Name", (o) => o.name],
      ["Slug", (o) => h("code", {}, o.slug)],
      ["Type", (o) => o.type],
      ["Plan", (o) => o.plan_id],
      ["", (o) => (o.slug === org() ? h("span", { class: "badge" }, "current") : actionButton(`Switch to ${o.name}`, () => refreshOrgs(o.slug), { class: "small" }))],
    ], organizations, { caption: "Your organizations" }),
    form({ class: "card" }, [
      h("h2", {}, "Create a team organization"),
      field("Name", name),
      h("button", { type: "submit", class: "primary" }, "Create organization"),
    ], async () => {
      const { org: created } = await post("/v1/organizations", { name: name.value.trim() });
      toast(`Organization ${created.name} created.`);
      await refreshOrgs(created.slug);
    }),
    h("div", { class: "card" }, h("h2", {}, "Invites for you"),
      table([
        ["Organization", (i) => i.organization],
        ["Role", (i) => i.role],
        ["", (i) => actionButton(`Accept invite to ${i.organization}`, async () => {
          await post(`/v1/user/invites/${enc(i.organization)}/accept`);
          toast(`You joined ${i.organization}.`);
          await refreshOrgs(i.organization);
        }, { class: "small" })],
      ], invites, { empty: "No invites." })));
}

