// The console's only ways out: the platform API (same origin, session cookie plus the
// CSRF header) and the data plane (Hrana over HTTP, with a database token).

/** An error answered by the API or the data plane, with its message and code. */
export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Calls the platform API. `body` is sent as JSON. Answers the parsed JSON body. */
export async function api(method, path, body) {
  const headers = { "X-Atoll-CSRF": "1" };
  const init = { method, headers, credentials: "same-origin", cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, `the server did not answer (${e.message})`, "network");
  }
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) {
    const message = (json && (json.error || json.message)) || text || response.statusText;
    throw new ApiError(response.status, message, json && json.code);
  }
  return json;
}

export const get = (path) => api("GET", path);
export const post = (path, body) => api("POST", path, body ?? {});
export const patch = (path, body) => api("PATCH", path, body);
export const del = (path) => api("DELETE", path);

/** Path of an organization's resource: `/v1/organizations/{org}/…`. */
export function orgPath(org, rest = "") {
  return `/v1/organizations/${encodeURIComponent(org)}${rest}`;
}

/** Every database of an organization, following the list's pages. */
export async function listDatabases(org) {
  const all = [];
  let cursor = null;
  do {
    const q = new URLSearchParams({ limit: "1000" });
    if (cursor) q.set("cursor", cursor);
    const { databases, pagination } = await get(orgPath(org, `/databases?${q}`));
    all.push(...databases);
    cursor = pagination && pagination.next;
  } while (cursor);
  return all;
}

/** A JavaScript value for display, from a Hrana value. */
export function fromValue(v) {
  switch (v.type) {
    case "null": return null;
    case "integer": return v.value;
    case "float": return v.value;
    case "text": return v.value;
    case "blob": return `<blob ${Math.floor((v.base64 || "").length * 3 / 4)} bytes>`;
    default: return JSON.stringify(v);
  }
}

/**
 * Runs statements on a database through the data plane, one batch in which each step
 * runs only if the one before succeeded. Answers one entry per statement:
 * `{ok, result?, error?}` (a statement after a failed one has neither). `encryptionKey`:
 * the key of a database encrypted with its customer's key (base64), sent as
 * `x-turso-encryption-key`.
 */
export async function runStatements(httpUrl, jwt, statements, encryptionKey) {
  const steps = statements.map((sql, i) => ({
    stmt: { sql, args: [], want_rows: true },
    ...(i > 0 ? { condition: { type: "ok", step: i - 1 } } : {}),
  }));
  const base = httpUrl.endsWith("/") ? httpUrl : `${httpUrl}/`;
  let response;
  try {
    response = await fetch(`${base}v2/pipeline`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${jwt}`,
        "Content-Type": "application/json",
        ...(encryptionKey ? { "x-turso-encryption-key": encryptionKey } : {}),
      },
      body: JSON.stringify({ requests: [{ type: "batch", batch: { steps } }, { type: "close" }] }),
      credentials: "omit",
      cache: "no-store",
    });
  } catch (e) {
    throw new ApiError(0, `the database at ${base} did not answer (${e.message})`, "network");
  }
  const json = await response.json().catch(() => null);
  if (!response.ok) {
    const message = (json && (json.message || json.error)) || response.statusText;
    throw new ApiError(response.status, message, json && json.code);
  }
  const first = json.results[0];
  if (first.type === "error") throw new ApiError(400, first.error.message, first.error.code);
  const batch = first.response.result;
  return statements.map((sql, i) => {
    const error = batch.step_errors[i];
    const result = batch.step_results[i];
    if (error) return { sql, ok: false, error };
    if (result) return { sql, ok: true, result };
    return { sql, ok: false, skipped: true };
  });
}

/**
 * Uploads a SQLite file to a database created for upload (`seed: database_upload`),
 * reporting progress as a fraction 0–1. XMLHttpRequest, because fetch does not report
 * upload progress.
 */
export function uploadFile(httpUrl, jwt, file, onProgress) {
  const base = httpUrl.endsWith("/") ? httpUrl : `${httpUrl}/`;
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", `${base}v1/upload`);
    xhr.setRequestHeader("Authorization", `Bearer ${jwt}`);
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(e.loaded / e.total);
    };
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        onProgress(1);
        resolve();
      } else {
        let message = xhr.statusText;
        try {
          const json = JSON.parse(xhr.responseText);
          message = json.message || json.error || message;
        } catch { /* not JSON */ }
        reject(new ApiError(xhr.status, message, "upload_failed"));
      }
    };
    xhr.onerror = () => reject(new ApiError(0, "the upload was interrupted", "network"));
    xhr.send(file);
  });
}
