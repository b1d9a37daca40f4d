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
  // Kept in this form only: sent once with the create, never stored by the console.
  const encryptionKey = h("input", {
    type: "password", name: "encryption_key", autocomplete: "off", spellcheck: "false",
    placeholder: "base64 of 32 random bytes",
  });
  const cipher = select([
    ["aes256gcm", "AES-256-GCM"],
    ["aes128gcm", "AES-128-GCM (16-byte key)"],
    ["chacha20poly1305", "ChaCha20-Poly1305"],
    ["aegis256", "AEGIS-256"],
    ["aegis256x2", "AEGIS-256X2"],
    ["aegis256x4", "AEGIS-256X4"],
    ["aegis128l", "AEGIS-128L (16-byte key)"],
    ["aegis128x2", "AEGIS-128X2 (16-byte key)"],
    ["aegis128x4", "AEGIS-128X4 (16-byte key)"],
  ], { name: "encryption_cipher" });
  const progress = h("progress", { max: 1, value: 0, hidden: true, "aria-label": "Upload progress" });
  const progressText = h("span", { class: "muted", "aria-live": "polite" });
  const uploadField = field("SQLite file", file, "WAL mode, checkpointed, page size 4096 (the server checks the file).");
  const copyFields = h("div", {},
    field("Copy from", from),
    field("As of (point in time, UTC)", timestamp,
      "Optional: the source as it was then, within its restorable window (shown on its page)."));
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
    h("div", { class: "row" },
      field("Encryption key", encryptionKey,
        "Optional: encrypt it with your own key (an empty database only). The server keeps no copy: every client must send it, and a lost key is lost data."),
      field("Cipher", cipher)),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Create database"), progress, progressText),
  ], async () => {
    const body = { name: name.value.trim(), group: group.value };
    if (sizeLimit.value.trim()) body.size_limit = sizeLimit.value.trim();
    if (encryptionKey.value.trim()) {
      body.remote_encryption = { encryption_key: encryptionKey.value.trim(), encryption_cipher: cipher.value };
      encryptionKey.value = "";
    }
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
  Promise.all([dailyHistory(name, 14), storageQuota()])
    .then(([history, quota]) => mount(chart, historyCharts(history, name, quota)))
    .catch((e) => mount(chart, errorBox(e)));

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
    backupsCard(database, base, canChange),
    canChange ? destroyCard(name, base) : null);
}

/** A datetime-local input's value (UTC, to the second) for an RFC 3339 time. */
function utcInputValue(iso) {
  return new Date(iso).toISOString().slice(0, 19);
}

/** The RFC 3339 instant of a datetime-local value read as UTC. */
function fromUtcInput(value) {
  const d = new Date(`${value}Z`);
  if (!value || Number.isNaN(d.getTime())) throw new Error("give a date and a time");
  return d.toISOString();
}

function formatUtc(iso) {
  return iso ? `${new Date(iso).toISOString().slice(0, 19).replace("T", " ")} UTC` : "—";
}

/**
 * Backups and point-in-time restore: the restorable window for everyone who can read the
 * database; restoring in place and copying as of a time for those who can change it.
 */
function backupsCard(database, base, canChange) {
  const body = h("div", {}, h("p", { class: "muted" }, "Loading backups…"));
  get(`${base}/backups`)
    .then((backups) => mount(body, backupsView(database, base, backups, canChange)))
    .catch((e) => mount(body, errorBox(e)));
  return h("div", { class: "card", "aria-labelledby": "backups-title" },
    h("h2", { id: "backups-title" }, "Backups and point-in-time restore"), body);
}

function backupsView(database, base, b, canChange) {
  const name = database.Name;
  const facts = h("dl", { class: "facts backups" },
    h("dt", {}, "Restorable from"), h("dd", { "data-restorable-from": b.restorable_from || "" }, formatUtc(b.restorable_from)),
    h("dt", {}, "Restorable until"), h("dd", { "data-restorable-until": b.restorable_until || "" }, formatUtc(b.restorable_until)),
    h("dt", {}, "Retention"), h("dd", {}, b.retention_days ? `${b.retention_days} days` : "everything is kept"),
    h("dt", {}, "Durability"), h("dd", {}, b.durability === "sync"
      ? "sync: a commit waits for object storage"
      : `lag: ${b.lag.commits} commits (${b.lag.seconds} s) not yet in object storage`),
    h("dt", {}, "In object storage"), h("dd", {}, formatBytes(b.stored_bytes)));
  const failing = b.last_error ? errorBox(new Error(`Shipping to object storage fails: ${b.last_error}`)) : null;
  const generations = table([
    ["Started", (g) => formatUtc(g.created_at)],
    ["First frame", (g) => String(g.start_frame_no)],
    ["Snapshot", (g) => formatBytes(g.snapshot_bytes)],
  ], b.generations, { caption: "Generations: a snapshot and the log after it", empty: "Nothing in object storage yet." });
  if (!canChange) return [facts, failing, generations, roleNote("member")];

  const defaultTime = b.restorable_until ? utcInputValue(b.restorable_until) : "";
  const span = b.restorable_from
    ? `Between ${formatUtc(b.restorable_from)} and ${formatUtc(b.restorable_until)}.`
    : "Nothing is restorable yet.";
  const restoreAt = h("input", { type: "datetime-local", name: "restore_at", step: 1, required: true, value: defaultTime });
  const restore = form({ class: "inline" }, [
    field("Restore in place to (UTC)", restoreAt, `${span} Replaces the data for every client; restoring to a time before the restore undoes it.`),
    h("button", { type: "submit", class: "danger" }, "Restore in place"),
  ], async () => {
    const timestamp = fromUtcInput(restoreAt.value);
    const ok = await confirmDialog({
      title: `Restore ${name} to ${formatUtc(timestamp)}?`,
      message: "Every client sees the database as it was then; what was written since is undone (and stays restorable).",
      action: "Restore",
      danger: true,
      typeToConfirm: name,
    });
    if (!ok) return;
    const { restored_to } = await post(`${base}/restore`, { timestamp });
    toast(`Database ${name} restored to ${formatUtc(restored_to)}.`);
    refresh();
  });
  const copyName = h("input", { name: "copy_name", required: true, autocomplete: "off" });
  const copyAt = h("input", { type: "datetime-local", name: "copy_at", step: 1, required: true, value: defaultTime });
  const copy = form({ class: "inline" }, [
    field("New database", copyName),
    field("As of (UTC)", copyAt),
    h("button", { type: "submit" }, "Copy as of this time"),
  ], async () => {
    const body = {
      name: copyName.value.trim(),
      group: database.group,
      seed: { type: "database", name, timestamp: fromUtcInput(copyAt.value) },
    };
    await post(orgPath(org(), "/databases"), body);
    toast(`Database ${body.name} created as ${name} was at ${formatUtc(body.seed.timestamp)}.`);
    location.hash = `#/databases/${enc(body.name)}`;
  });
  return [facts, failing, generations, h("h3", {}, "Restore in place"), restore, h("h3", {}, "Copy into a new database"), copy];
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
 * The last `days` days (UTC) of a database (`name`) or of the whole organization (`null`),
 * day by day: one question, with the usage routes' `granularity` extension.
 */
async function dailyHistory(name, days) {
  const today = utcDay(new Date());
  const from = new Date(today.getTime() - (days - 1) * 86400000);
  const to = new Date(today.getTime() + 86400000);
  const q = new URLSearchParams({ from: from.toISOString(), to: to.toISOString(), granularity: "day" });
  if (name) return (await get(orgPath(org(), `/databases/${enc(name)}/usage?${q}`))).database.history;
  return (await get(orgPath(org(), `/usage?${q}`))).organization.history;
}

/** The storage quota of the current organization's plan (null: unlimited or unknown). */
async function storageQuota() {
  const { plans } = await get("/v1/plans");
  const plan = plans.find((p) => p.name === session.org.plan_id);
  return (plan && plan.quotas.storage) || null;
}

/** Charts of a daily history: rows read and written, and storage against the plan's quota. */
function historyCharts(history, subject, quota) {
  const labels = history.map((i) => {
    const d = new Date(i.start);
    return `${d.getUTCMonth() + 1}/${d.getUTCDate()}`;
  });
  return h("div", { class: "charts" },
    lineChart({
      title: `Rows read and written per day (UTC), ${subject}`,
      labels,
      series: [
        { name: "Rows read", values: history.map((i) => i.rows_read) },
        { name: "Rows written", values: history.map((i) => i.rows_written) },
      ],
    }),
    lineChart({
      title: `Storage per day (UTC, largest size measured), ${subject}`,
      labels,
      series: [{ name: "Storage", values: history.map((i) => i.storage_bytes) }],
      limit: quota ? { name: "Plan's storage quota", value: quota } : null,
      format: formatBytes,
    }));
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
  const which = select([
    ["", `The whole organization (${databases.length} databases)`],
    ...databases.map((d) => [d.Name, d.Name]),
  ], { name: "database" });
  const days = select([["7", "7 days"], ["14", "14 days"], ["30", "30 days"]], { name: "days" });
  days.value = "14";
  const draw = async () => {
    mount(chartBox, h("p", { class: "muted" }, "Loading…"));
    try {
      const history = await dailyHistory(which.value || null, Number(days.value));
      mount(chartBox, historyCharts(history, which.value || `all of ${session.org.name}`, quotas.storage_bytes));
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
      h("p", { class: "muted" }, "Storage is sampled every hour (and after writes) and kept for 90 days; a day shows its largest size. The bars below are the sizes now.")),
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
  const from = h("input", { type: "datetime-local", name: "from", step: 1 });
  const to = h("input", { type: "datetime-local", name: "to", step: 1 });
  const codes = h("datalist", { id: "audit-codes" });
  const known = new Set();
  // The server filters (the audit-log route's filters, an Atoll extension): exact code,
  // author and origin, and a time range; pages count the matching entries.
  const load = async () => {
    const q = new URLSearchParams({ page: state.page, page_size: 100 });
    if (code.value.trim()) q.set("code", code.value.trim());
    if (author.value.trim()) q.set("author", author.value.trim());
    if (origin.value) q.set("origin", origin.value);
    if (from.value) q.set("from", fromUtcInput(from.value));
    if (to.value) q.set("to", fromUtcInput(to.value));
    const { audit_logs: entries, pagination } = await get(orgPath(org(), `/audit-logs?${q}`));
    for (const e of entries) known.add(e.code);
    mount(codes, [...known].sort().map((c) => h("option", { value: c })));
    const filtered = [...q.keys()].some((k) => k !== "page" && k !== "page_size");
    mount(box,
      table([
        ["When", (e) => formatDate(e.created_at)],
        ["Code", (e) => h("code", {}, e.code)],
        ["Message", (e) => e.message],
        ["Author", (e) => e.author],
        ["Origin", (e) => e.origin],
      ], entries, { caption: "Audit log entries", empty: "No entries match." }),
      h("div", { class: "actions" },
        h("span", { class: "muted", "data-total": pagination.total_rows },
          `Page ${pagination.page} of ${Math.max(1, pagination.total_pages)} (${pagination.total_rows} ${filtered ? "matching " : ""}entries)`),
        state.page > 1 ? actionButton("Newer", async () => { state.page -= 1; await reload(); }) : null,
        state.page < pagination.total_pages ? actionButton("Older", async () => { state.page += 1; await reload(); }) : null));
  };
  const reload = async () => {
    try {
      await load();
    } catch (e) {
      mount(box, errorBox(e));
    }
  };
  // Typing waits for a pause before asking; a choice asks at once. Back to page 1 either way.
  let timer = null;
  const changed = (delay) => () => {
    clearTimeout(timer);
    timer = setTimeout(() => { state.page = 1; reload(); }, delay);
  };
  for (const input of [code, author, from, to]) input.addEventListener("input", changed(300));
  for (const input of [origin, from, to]) input.addEventListener("change", changed(0));
  await reload();
  return page("Audit log",
    h("div", { class: "row filters" },
      field("Code", code), field("Author", author), field("Origin", origin),
      field("From (UTC)", from), field("Until (UTC)", to), codes),
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

