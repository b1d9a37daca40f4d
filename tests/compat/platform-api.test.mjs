// Compatibility of Atoll's platform API with the official TypeScript SDK,
// @tursodatabase/api, driven against a running `atoll dev` (see scripts/compat.sh).
//
// Environment (set by scripts/compat.sh):
//   ATOLL_URL       http://127.0.0.1:PORT of the server
//   ATOLL_TOKEN     login token of the instance administrator `admin`
//   ATOLL_PASSWORD  that user's password
//
// Every call under test goes through the SDK. Raw HTTP is used only for set-up the SDK
// has no method for: creating users and team organizations, logging in, minting scoped
// API tokens, reading /v1/user and accepting invites. Every test makes its own users,
// organizations, groups and tokens with unique names, so the tests are independent.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createClient } from '@tursodatabase/api';

const URL_BASE = (process.env.ATOLL_URL ?? '').replace(/\/+$/, '');
const ADMIN_TOKEN = process.env.ATOLL_TOKEN ?? '';
const ADMIN_PASSWORD = process.env.ATOLL_PASSWORD ?? '';
if (!URL_BASE || !ADMIN_TOKEN) {
  throw new Error(
    'ATOLL_URL and ATOLL_TOKEN must be set: run the suite with scripts/compat.sh',
  );
}

// The admin user's personal organization and its first group (`atoll dev`).
const ADMIN = 'admin';
const CATALOG = ['local', 'aws-us-east-1', 'aws-eu-west-1', 'aws-ap-south-1'];

// ---------------------------------------------------------------------------------------
// Helpers

const RUN = randomBytes(3).toString('hex');
let counter = 0;
/** A unique lower-case name (≤ 39 characters: usernames and slugs allow no more). */
function uniq(prefix) {
  counter += 1;
  return `${prefix}-${RUN}-${counter}`;
}

/** An SDK client, configured as a user of the SDK would. */
function sdk(org, token) {
  return createClient({ org, token, baseUrl: `${URL_BASE}/v1/` });
}

/** Raw HTTP for set-up steps the SDK lacks. Returns { status, body }. */
async function http(method, path, { token, body } = {}) {
  const headers = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${URL_BASE}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed };
}

/** Like http(), but fails unless the answer is 200. */
async function ok(method, path, options) {
  const res = await http(method, path, options);
  assert.equal(
    res.status,
    200,
    `${method} ${path} answered ${res.status}: ${JSON.stringify(res.body)}`,
  );
  return res.body;
}

/** Creates a user (as the instance admin) and logs in; returns its name, email and token. */
async function newUser(prefix = 'u', email) {
  const username = uniq(prefix);
  const password = `pw-${randomBytes(8).toString('hex')}`;
  const mail = email ?? `${username}@example.test`;
  const created = await ok('POST', '/v1/admin/users', {
    token: ADMIN_TOKEN,
    body: { username, password, email: mail },
  });
  assert.equal(created.user.username, username);
  const token = await login(username, password);
  return { username, password, email: mail, token };
}

async function login(username, password) {
  const body = await ok('POST', '/v1/auth/login', { body: { username, password } });
  assert.equal(typeof body.token, 'string');
  return body.token;
}

/** Creates a team organization owned by the token's user; returns its slug. */
async function newTeamOrg(token = ADMIN_TOKEN) {
  const name = uniq('Compat Team');
  const body = await ok('POST', '/v1/organizations', { token, body: { name } });
  const expected = name.toLowerCase().replace(/[^a-z0-9]+/g, '-');
  assert.equal(body.org.slug, expected);
  assert.equal(body.org.type, 'team');
  // Team organizations start on the instance's default plan; the instance administrator
  // moves them to a paid one anyway, as an operator would.
  await ok('POST', `/v1/admin/organizations/${body.org.slug}/plan`, { token: ADMIN_TOKEN, body: { plan: 'scaler' } });
  return body.org.slug;
}

/** Mints an API token with the given body (raw: the SDK's create() sends none). */
async function mintToken(name, body, token = ADMIN_TOKEN) {
  return ok('POST', `/v1/auth/api-tokens/${name}`, { token, body });
}

/**
 * Asserts that the SDK call rejects with its TursoClientError carrying `status` and the
 * server's error message. (The SDK does not export the class, so it is checked by name.)
 */
async function rejectsWith(promise, status, messagePattern) {
  await assert.rejects(promise, (err) => {
    assert.equal(err.name, 'TursoClientError', `expected TursoClientError, got ${err}`);
    assert.ok(err instanceof Error);
    assert.equal(err.status, status, `expected status ${status}, got ${err.status}: ${err.message}`);
    assert.equal(typeof err.message, 'string');
    assert.ok(err.message.length > 0, 'the error carries the server message');
    if (messagePattern) assert.match(err.message, messagePattern);
    return true;
  });
}

function bySlug(orgs, slug) {
  return orgs.find((o) => o.slug === slug);
}

// ---------------------------------------------------------------------------------------
// Organizations

describe('organizations', () => {
  test('list() returns the real organizations as objects', async () => {
    const team = await newTeamOrg();
    const orgs = await sdk(ADMIN, ADMIN_TOKEN).organizations.list();
    assert.ok(Array.isArray(orgs));
    assert.ok(orgs.length >= 2, `expected at least 2 organizations, got ${orgs.length}`);

    const personal = bySlug(orgs, ADMIN);
    assert.ok(personal, 'the personal organization is listed');
    assert.equal(personal.type, 'personal');
    assert.equal(personal.name, ADMIN);
    for (const field of ['overages', 'blocked_reads', 'blocked_writes']) {
      assert.equal(typeof personal[field], 'boolean', `organization.${field}`);
    }

    const created = bySlug(orgs, team);
    assert.ok(created, 'the new team organization is listed');
    assert.equal(created.type, 'team');
    assert.equal(created.overages, false);
    assert.equal(created.blocked_reads, false);
    assert.equal(created.blocked_writes, false);
  });

  test('list() shows a new user only their own organizations', async () => {
    const user = await newUser('solo');
    const orgs = await sdk(user.username, user.token).organizations.list();
    assert.deepEqual(
      orgs.map((o) => [o.slug, o.type]),
      [[user.username, 'personal']],
    );
  });

  test('update({ overages }) on a team organization', async () => {
    const team = await newTeamOrg();
    const client = sdk(team, ADMIN_TOKEN);

    const on = await client.organizations.update({ overages: true });
    assert.equal(on.slug, team);
    assert.equal(on.type, 'team');
    assert.equal(on.overages, true);
    assert.equal(bySlug(await client.organizations.list(), team).overages, true);

    const off = await client.organizations.update({ overages: false });
    assert.equal(off.overages, false);
    assert.equal(bySlug(await client.organizations.list(), team).overages, false);
  });

  test('update() of an organization the caller is not in is 404', async () => {
    const stranger = await newUser('stranger');
    const team = await newTeamOrg();
    await rejectsWith(sdk(team, stranger.token).organizations.update({ overages: true }), 404);
  });

  test('members(), addMember(), removeMember()', async () => {
    const team = await newTeamOrg();
    const user = await newUser('mem');
    const orgs = sdk(team, ADMIN_TOKEN).organizations;

    const initial = await orgs.members();
    assert.deepEqual(
      initial.map((m) => [m.username, m.role]),
      [[ADMIN, 'owner']],
    );

    const added = await orgs.addMember(user.username, 'admin');
    assert.deepEqual(added, { member: user.username, role: 'admin' });

    const members = await orgs.members();
    const member = members.find((m) => m.username === user.username);
    assert.deepEqual(member, { username: user.username, role: 'admin', email: user.email });
    assert.equal(members.length, 2);

    // The new member sees the organization through the SDK too.
    const seen = await sdk(team, user.token).organizations.list();
    assert.equal(bySlug(seen, team)?.type, 'team');

    await rejectsWith(orgs.addMember(user.username, 'member'), 409);

    const removed = await orgs.removeMember(user.username);
    assert.deepEqual(removed, { member: user.username });
    assert.deepEqual(
      (await orgs.members()).map((m) => m.username),
      [ADMIN],
    );
    await rejectsWith(orgs.removeMember(user.username), 404);
    await rejectsWith(sdk(team, user.token).organizations.members(), 404);
  });

  test('addMember() without a role adds a member', async () => {
    const team = await newTeamOrg();
    const user = await newUser('mem');
    const orgs = sdk(team, ADMIN_TOKEN).organizations;
    assert.deepEqual(await orgs.addMember(user.username), {
      member: user.username,
      role: 'member',
    });
    const member = (await orgs.members()).find((m) => m.username === user.username);
    assert.equal(member?.role, 'member');
  });

  test('addMember() errors: unknown user 404, personal organization 400, non-admin 403', async () => {
    const team = await newTeamOrg();
    const orgs = sdk(team, ADMIN_TOKEN).organizations;
    await rejectsWith(orgs.addMember(uniq('nobody')), 404);

    const user = await newUser('mem');
    await rejectsWith(sdk(ADMIN, ADMIN_TOKEN).organizations.addMember(user.username), 400);

    // A plain member may not manage members.
    await orgs.addMember(user.username, 'member');
    const other = await newUser('mem');
    await rejectsWith(sdk(team, user.token).organizations.addMember(other.username), 403);
  });

  test('inviteUser(), listInvites(), deleteInvite()', async () => {
    const team = await newTeamOrg();
    const orgs = sdk(team, ADMIN_TOKEN).organizations;
    const email = `${uniq('inv')}@example.test`;

    assert.deepEqual(await orgs.listInvites(), []);

    const invited = await orgs.inviteUser(email, 'admin');
    assert.equal(invited.email, email);
    assert.equal(invited.role, 'admin');
    assert.equal(invited.organization, team);

    const defaulted = `${uniq('inv')}@example.test`;
    assert.equal((await orgs.inviteUser(defaulted)).role, 'member');

    const invites = await orgs.listInvites();
    assert.deepEqual(invites.map((i) => i.email).sort(), [email, defaulted].sort());
    const invite = invites.find((i) => i.email === email);
    assert.equal(typeof invite.id, 'number');
    assert.equal(invite.role, 'admin');
    assert.ok(!Number.isNaN(Date.parse(invite.created_at)), `created_at ${invite.created_at}`);

    assert.equal(await orgs.deleteInvite(email), undefined);
    assert.deepEqual(
      (await orgs.listInvites()).map((i) => i.email),
      [defaulted],
    );
    await rejectsWith(orgs.deleteInvite(email), 404);
  });

  test('inviteUser() errors: personal organization 400, invalid role 400', async () => {
    await rejectsWith(
      sdk(ADMIN, ADMIN_TOKEN).organizations.inviteUser(`${uniq('inv')}@example.test`),
      400,
    );
    const team = await newTeamOrg();
    await rejectsWith(
      sdk(team, ADMIN_TOKEN).organizations.inviteUser(`${uniq('inv')}@example.test`, 'boss'),
      400,
    );
  });

  test('an invited user sees has_pending_invites and can accept', async () => {
    const team = await newTeamOrg();
    const orgs = sdk(team, ADMIN_TOKEN).organizations;
    const email = `${uniq('guest')}@example.test`;
    await orgs.inviteUser(email, 'member');

    // A user with that email, created after the invite, finds it waiting.
    const guest = await newUser('guest', email);
    const before = await ok('GET', '/v1/user', { token: guest.token });
    assert.equal(before.user.username, guest.username);
    assert.equal(before.user.email, email);
    assert.equal(before.user.has_pending_invites, true);

    // Not a member yet: the organization is invisible to them.
    await rejectsWith(sdk(team, guest.token).organizations.members(), 404);

    const accepted = await ok('POST', `/v1/user/invites/${team}/accept`, { token: guest.token });
    assert.deepEqual(accepted, { organization: team, role: 'member' });

    const after = await ok('GET', '/v1/user', { token: guest.token });
    assert.equal(after.user.has_pending_invites, false);

    const member = (await orgs.members()).find((m) => m.username === guest.username);
    assert.deepEqual(member, { username: guest.username, role: 'member', email });
    assert.deepEqual(await orgs.listInvites(), []);
    const guestOrgs = await sdk(team, guest.token).organizations.list();
    assert.deepEqual(guestOrgs.map((o) => o.slug).sort(), [guest.username, team].sort());

    // Accepting twice finds no invite.
    const again = await http('POST', `/v1/user/invites/${team}/accept`, { token: guest.token });
    assert.equal(again.status, 404);
  });

  test('delete() removes a team organization; a personal one is refused', async () => {
    const team = await newTeamOrg();
    const client = sdk(team, ADMIN_TOKEN);
    assert.deepEqual(await client.organizations.delete(), { organization: team });
    assert.equal(bySlug(await client.organizations.list(), team), undefined);
    await rejectsWith(client.organizations.members(), 404);

    await rejectsWith(sdk(ADMIN, ADMIN_TOKEN).organizations.delete(), 400);
  });
});

// ---------------------------------------------------------------------------------------
// Groups

describe('groups', () => {
  test('create(), get(), list(), addLocation(), removeLocation(), delete()', async () => {
    const groups = sdk(ADMIN, ADMIN_TOKEN).groups;
    const name = uniq('grp');

    const created = await groups.create(name, 'local');
    assert.equal(created.name, name);
    assert.equal(created.primary, 'local');
    assert.deepEqual(created.locations, ['local']);
    assert.equal(typeof created.uuid, 'string');
    assert.ok(created.uuid.length > 0);

    assert.deepEqual(await groups.get(name), created);

    const listed = await groups.list();
    assert.ok(listed.some((g) => g.name === 'default' && g.primary === 'local'));
    assert.deepEqual(
      listed.find((g) => g.name === name),
      created,
    );

    const added = await groups.addLocation(name, 'aws-us-east-1');
    assert.equal(added.name, name);
    assert.equal(added.primary, 'local');
    assert.deepEqual(added.locations, ['local', 'aws-us-east-1']);
    assert.deepEqual((await groups.get(name)).locations, ['local', 'aws-us-east-1']);

    const removed = await groups.removeLocation(name, 'aws-us-east-1');
    assert.deepEqual(removed.locations, ['local']);
    assert.deepEqual((await groups.get(name)).locations, ['local']);

    const deleted = await groups.delete(name);
    assert.equal(deleted.name, name);
    assert.equal(deleted.uuid, created.uuid);
    assert.equal(
      (await groups.list()).find((g) => g.name === name),
      undefined,
    );
    await rejectsWith(groups.get(name), 404);
  });

  test('create() in another location of the catalog', async () => {
    const groups = sdk(ADMIN, ADMIN_TOKEN).groups;
    const name = uniq('grp');
    const created = await groups.create(name, 'aws-eu-west-1');
    assert.equal(created.primary, 'aws-eu-west-1');
    assert.deepEqual(created.locations, ['aws-eu-west-1']);
    await groups.delete(name);
  });

  test('groups of a team organization', async () => {
    const team = await newTeamOrg();
    const groups = sdk(team, ADMIN_TOKEN).groups;
    // A new team organization has a `default` group, as a personal one does.
    assert.deepEqual((await groups.list()).map((g) => g.name), ['default']);
    const name = uniq('grp');
    await groups.create(name, 'local');
    assert.deepEqual(
      (await groups.list()).map((g) => g.name).sort(),
      ['default', name].sort(),
    );
    // Group names are per organization.
    await rejectsWith(sdk(ADMIN, ADMIN_TOKEN).groups.get(name), 404);
  });

  test('errors: missing 404, duplicate 409, invalid location 400, invalid name 400', async () => {
    const groups = sdk(ADMIN, ADMIN_TOKEN).groups;
    await rejectsWith(groups.get(uniq('missing')), 404);
    await rejectsWith(groups.delete(uniq('missing')), 404);
    await rejectsWith(groups.addLocation(uniq('missing'), 'local'), 404);

    const name = uniq('grp');
    await groups.create(name, 'local');
    await rejectsWith(groups.create(name, 'local'), 409);
    await rejectsWith(groups.create('default', 'aws-us-east-1'), 409);

    await rejectsWith(groups.create(uniq('grp'), 'nowhere-1'), 400);
    await rejectsWith(groups.create('Not_A_Valid_Name', 'local'), 400);

    await rejectsWith(groups.addLocation(name, 'nowhere-1'), 400);
    await rejectsWith(groups.removeLocation(name, 'local'), 400); // the primary
    await rejectsWith(groups.removeLocation(name, 'aws-ap-south-1'), 400); // not in it

    await groups.delete(name);
  });

  test('an organization the caller is not in is 404', async () => {
    const stranger = await newUser('stranger');
    const groups = sdk(ADMIN, stranger.token).groups;
    await rejectsWith(groups.list(), 404);
    await rejectsWith(groups.get('default'), 404);
    await rejectsWith(groups.create(uniq('grp'), 'local'), 404);
  });
});

// ---------------------------------------------------------------------------------------
// Locations

describe('locations', () => {
  test('list() returns [{ code, description }] of the catalog', async () => {
    const locations = await sdk(ADMIN, ADMIN_TOKEN).locations.list();
    assert.ok(Array.isArray(locations));
    for (const location of locations) {
      assert.deepEqual(Object.keys(location).sort(), ['code', 'description']);
      assert.equal(typeof location.code, 'string');
      assert.equal(typeof location.description, 'string');
      assert.ok(location.description.length > 0, `description of ${location.code}`);
    }
    assert.deepEqual(
      locations.map((l) => l.code).sort(),
      [...CATALOG].sort(),
    );
    assert.ok(locations.find((l) => l.code === 'local'));
  });
});

// ---------------------------------------------------------------------------------------
// API tokens

describe('apiTokens', () => {
  test('create(), list(), use, revoke(); the revoked token gets 401', async () => {
    const tokens = sdk(ADMIN, ADMIN_TOKEN).apiTokens;
    const name = uniq('tok');

    const created = await tokens.create(name);
    assert.equal(created.name, name);
    assert.equal(typeof created.id, 'string');
    assert.ok(created.id.length > 0);
    assert.equal(typeof created.token, 'string');
    assert.ok(created.token.length > 16);
    // Unrestricted tokens are deprecated, and the answer says so.
    assert.equal(typeof created.deprecation, 'string');

    const listed = (await tokens.list()).find((t) => t.name === name);
    assert.ok(listed, 'the new token is listed');
    assert.equal(listed.id, created.id);
    assert.equal(listed.token, undefined, 'listings never show the secret');
    assert.equal(listed.organization, undefined, 'an unrestricted token has no organization');

    // The new token works with the SDK like the login token.
    const asToken = sdk(ADMIN, created.token);
    assert.ok(bySlug(await asToken.organizations.list(), ADMIN));
    assert.ok((await asToken.groups.list()).some((g) => g.name === 'default'));

    await rejectsWith(tokens.create(name), 409);

    assert.deepEqual(await tokens.revoke(name), { token: name });
    assert.equal(
      (await tokens.list()).find((t) => t.name === name),
      undefined,
    );

    await rejectsWith(asToken.groups.list(), 401);
    await rejectsWith(asToken.organizations.list(), 401);
    await rejectsWith(tokens.revoke(name), 404);
  });

  test('validate() checks the client\'s own token: a login token expires in 7 days', async () => {
    const validation = await sdk(ADMIN, ADMIN_TOKEN).apiTokens.validate(ADMIN_TOKEN);
    const now = Math.floor(Date.now() / 1000);
    const week = 7 * 24 * 3600;
    assert.equal(validation.valid, true);
    assert.equal(typeof validation.expiry, 'number');
    assert.ok(validation.expiry > now, 'expires in the future');
    assert.ok(validation.expiry <= now + week + 60, `expiry ${validation.expiry} ≤ 7 days`);
  });

  test('validate() reports a never-expiring API token as valid=false, expiry=-1 (SDK logic)', async () => {
    const name = uniq('tok');
    const created = await sdk(ADMIN, ADMIN_TOKEN).apiTokens.create(name);
    try {
      const client = sdk(ADMIN, created.token);
      // The server answers {exp: -1}; the SDK computes valid = exp !== -1 && exp > now.
      assert.deepEqual(await client.apiTokens.validate(created.token), {
        valid: false,
        expiry: -1,
      });
      // The SDK sends its configured token, not the argument (its own Authorization
      // header wins): validating the login token through this client still says -1.
      assert.deepEqual(await client.apiTokens.validate(ADMIN_TOKEN), {
        valid: false,
        expiry: -1,
      });
      // And the token is nevertheless usable.
      assert.ok(bySlug(await client.organizations.list(), ADMIN));
    } finally {
      await sdk(ADMIN, ADMIN_TOKEN).apiTokens.revoke(name);
    }
    await rejectsWith(sdk(ADMIN, created.token).apiTokens.validate(created.token), 401);
  });

  test('each user lists only their own tokens', async () => {
    const user = await newUser('tokuser');
    const name = uniq('tok');
    await sdk(user.username, user.token).apiTokens.create(name);
    const mine = (await sdk(user.username, user.token).apiTokens.list()).map((t) => t.name);
    assert.deepEqual(mine, [name]);
    const admins = (await sdk(ADMIN, ADMIN_TOKEN).apiTokens.list()).map((t) => t.name);
    assert.ok(!admins.includes(name));
  });

  test('an organization-scoped token works for its organization and is refused (403) for another', async () => {
    const team = await newTeamOrg();
    const name = uniq('orgtok');
    const minted = await mintToken(name, { organization: team });
    assert.equal(minted.name, name);
    assert.equal(typeof minted.token, 'string');
    assert.equal(minted.deprecation, undefined, 'scoped tokens are not deprecated');

    const listed = (await sdk(ADMIN, ADMIN_TOKEN).apiTokens.list()).find((t) => t.name === name);
    assert.equal(listed?.id, minted.id);
    assert.equal(listed?.organization, team);

    // Its own organization: everything an organization-level token may do.
    const scoped = sdk(team, minted.token);
    assert.deepEqual(
      (await scoped.organizations.list()).map((o) => o.slug),
      [team],
    );
    assert.deepEqual(
      (await scoped.organizations.members()).map((m) => [m.username, m.role]),
      [[ADMIN, 'owner']],
    );
    const group = uniq('grp');
    assert.equal((await scoped.groups.create(group, 'local')).name, group);
    assert.deepEqual(
      (await scoped.groups.list()).map((g) => g.name).sort(),
      ['default', group].sort(),
    );
    assert.equal((await scoped.organizations.update({ overages: true })).overages, true);
    assert.equal((await scoped.groups.delete(group)).name, group);
    // Locations are not organization resources: any valid token reads them.
    assert.ok((await scoped.locations.list()).some((l) => l.code === 'local'));

    // Another organization of the same user: 403.
    const other = sdk(ADMIN, minted.token);
    await rejectsWith(other.groups.list(), 403);
    await rejectsWith(other.groups.get('default'), 403);
    await rejectsWith(other.groups.create(uniq('grp'), 'local'), 403);
    await rejectsWith(other.organizations.members(), 403);
    await rejectsWith(other.organizations.update({ overages: true }), 403);

    // A scoped token cannot mint or list the user's tokens (that would widen it).
    await rejectsWith(scoped.apiTokens.create(uniq('tok')), 403);
    await rejectsWith(scoped.apiTokens.list(), 403);

    await sdk(ADMIN, ADMIN_TOKEN).apiTokens.revoke(name);
    await rejectsWith(scoped.groups.list(), 401);
  });

  test('a read-only group-scoped token reads its group only', async () => {
    const team = await newTeamOrg();
    const admin = sdk(team, ADMIN_TOKEN).groups;
    const pinned = uniq('grp');
    const other = uniq('grp');
    await admin.create(pinned, 'local');
    await admin.create(other, 'local');

    const name = uniq('grptok');
    const minted = await mintToken(name, { organization: team, group: pinned, scopes: ['read-only'] });
    assert.equal(minted.deprecation, undefined);
    const listed = (await sdk(ADMIN, ADMIN_TOKEN).apiTokens.list()).find((t) => t.name === name);
    assert.equal(listed?.organization, team);
    assert.equal(listed?.group, pinned);

    const groups = sdk(team, minted.token).groups;
    assert.equal((await groups.get(pinned)).name, pinned);
    assert.deepEqual(
      (await groups.list()).map((g) => g.name),
      [pinned],
    );
    await rejectsWith(groups.get(other), 403);
    await rejectsWith(groups.addLocation(pinned, 'aws-us-east-1'), 403); // lacks group:configure
    await rejectsWith(groups.create(uniq('grp'), 'local'), 403);
    await rejectsWith(groups.delete(pinned), 403);
    await rejectsWith(sdk(team, minted.token).organizations.members(), 403);

    await sdk(ADMIN, ADMIN_TOKEN).apiTokens.revoke(name);
  });
});

// ---------------------------------------------------------------------------------------
// The environment the suite was given

describe('environment', () => {
  test('ATOLL_PASSWORD logs the admin in', { skip: !ADMIN_PASSWORD && 'ATOLL_PASSWORD not set' }, async () => {
    const token = await login(ADMIN, ADMIN_PASSWORD);
    const validation = await sdk(ADMIN, token).apiTokens.validate(token);
    assert.equal(validation.valid, true);
    const user = await ok('GET', '/v1/user', { token });
    assert.equal(user.user.username, ADMIN);
    assert.equal(user.user.admin, true);
  });
});
