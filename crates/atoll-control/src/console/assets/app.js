// The console's shell: login, the organization switcher, and the hash router.
//
// The session is a login token in an HttpOnly cookie set by POST /v1/auth/session: this
// code never sees it. What the user may do comes from their role in the organization
// (GET …/members/{username}); buttons they may not use are not drawn, and the API decides
// anyway.

import { ApiError, get, orgPath, api } from "./api.js";
import { h, mount, field, form, errorBox } from "./ui.js";
import * as pages from "./pages.js";
import { sqlPage } from "./sql.js";

const ROLE_RANK = { viewer: 0, member: 1, admin: 2, owner: 3 };

/** What the pages share: who is logged in, in which organization, with which role. */
export const session = {
  username: null,
  orgs: [],
  org: null,
  role: "viewer",
  /** Whether the user's role is at least `role` in the current organization. */
  atLeast(role) {
    return ROLE_RANK[this.role] >= ROLE_RANK[role];
  },
};

const ORG_KEY = "atoll.console.org";
const main = () => document.getElementById("main");

async function start() {
  document.getElementById("logout").addEventListener("click", logout);
  document.getElementById("org-select").addEventListener("change", (e) => switchOrg(e.target.value));
  window.addEventListener("hashchange", route);
  try {
    const { user } = await get("/v1/user");
    await signedIn(user.username);
  } catch (e) {
    if (e instanceof ApiError && (e.status === 401 || e.status === 403)) showLogin();
    else mount(main(), errorBox(e));
  }
}

function showLogin(message) {
  document.getElementById("top").hidden = true;
  document.getElementById("nav").hidden = true;
  const username = h("input", { name: "username", autocomplete: "username", required: true });
  const password = h("input", { name: "password", type: "password", autocomplete: "current-password", required: true });
  const loginForm = form({ class: "card login", "aria-labelledby": "login-title" }, [
    h("h1", { id: "login-title" }, "Log in to Atoll"),
    message ? h("p", { class: "muted" }, message) : null,
    field("Username", username),
    field("Password", password),
    h("button", { type: "submit", class: "primary" }, "Log in"),
  ], async () => {
    const started = await api("POST", "/v1/auth/session", { username: username.value, password: password.value });
    password.value = "";
    await signedIn(started.username);
  });
  mount(main(), loginForm);
  username.focus();
}

async function signedIn(username) {
  session.username = username;
  const organizations = await get("/v1/organizations");
  session.orgs = organizations;
  const saved = localStorage.getItem(ORG_KEY);
  const pick = organizations.find((o) => o.slug === saved) || organizations.find((o) => o.slug === username) || organizations[0];
  document.getElementById("top").hidden = false;
  document.getElementById("nav").hidden = false;
  mount(document.getElementById("whoami"), username);
  await switchOrg(pick ? pick.slug : null, false);
  if (!location.hash || location.hash === "#/" || location.hash === "#") location.hash = "#/databases";
  else route(null);
}

/** Makes `slug` the current organization and learns the user's role in it. */
export async function switchOrg(slug, rerender = true) {
  session.org = session.orgs.find((o) => o.slug === slug) || null;
  session.role = "viewer";
  if (session.org) {
    localStorage.setItem(ORG_KEY, slug);
    try {
      const { member } = await get(orgPath(slug, `/members/${encodeURIComponent(session.username)}`));
      session.role = member.role;
    } catch {
      session.role = "viewer";
    }
  }
  const select = document.getElementById("org-select");
  mount(select, session.orgs.map((o) => h("option", { value: o.slug, selected: o.slug === slug }, o.type === "personal" ? `${o.name} (personal)` : o.name)));
  document.body.dataset.role = session.role;
  if (rerender) route(null);
}

/** Reloads the organization list (after creating one) and switches to `slug`. */
export async function refreshOrgs(slug) {
  session.orgs = await get("/v1/organizations");
  await switchOrg(slug || (session.org && session.org.slug));
}

async function logout() {
  try {
    await api("DELETE", "/v1/auth/session");
  } finally {
    session.username = null;
    location.hash = "";
    showLogin("You are logged out.");
  }
}

const ROUTES = [
  [/^#\/databases$/, () => pages.databasesPage()],
  [/^#\/databases\/([^/]+)$/, (m) => pages.databasePage(decodeURIComponent(m[1]))],
  [/^#\/groups$/, () => pages.groupsPage()],
  [/^#\/sql(?:\/([^/]+))?$/, (m) => sqlPage(m[1] ? decodeURIComponent(m[1]) : null)],
  [/^#\/usage$/, () => pages.usagePage()],
  [/^#\/tokens$/, () => pages.tokensPage()],
  [/^#\/members$/, () => pages.membersPage()],
  [/^#\/audit$/, () => pages.auditPage()],
  [/^#\/organizations$/, () => pages.organizationsPage()],
];

/** Renders the page of the current hash. `event` is the hashchange that moved there, if
 * any: focus then moves to the new page, so keyboard and screen-reader users start there. */
async function route(event) {
  if (!session.username) return;
  const hash = location.hash || "#/databases";
  const section = hash.split("/")[1];
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.section === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const target = main();
  for (const [pattern, render] of ROUTES) {
    const m = hash.match(pattern);
    if (!m) continue;
    mount(target, h("p", { class: "muted" }, "Loading…"));
    try {
      const content = await render(m);
      mount(target, content);
      const heading = target.querySelector("h1");
      if (heading) document.title = `${heading.textContent} · Atoll console`;
      if (event instanceof HashChangeEvent) target.focus({ preventScroll: true });
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        showLogin("Your session has ended: log in again.");
        return;
      }
      mount(target, h("h1", {}, "Something went wrong"), errorBox(e));
    }
    return;
  }
  mount(target, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/databases" }, "Back to the databases")));
}

/** Re-renders the current page (after a change). */
export function refresh() {
  return route(null);
}

start();
