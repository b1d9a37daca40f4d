#!/usr/bin/env bash
# Schemathesis against the platform API: generates requests from `/openapi.json` of a live
# `atoll dev` and checks every answer.
#
#   cargo build -p atoll && scripts/schemathesis.sh
#
# Checks (and only these, so the run means the same thing on every schemathesis release):
#   not_a_server_error           no 5xx, ever;
#   status_code_conformance      every status is one the document lists for the operation;
#   content_type_conformance     every body has the documented content type;
#   response_schema_conformance  every body matches the documented schema.
#
# Bounded: at most $ATOLL_SCHEMATHESIS_EXAMPLES examples per operation (default 25) and a
# time budget of $ATOLL_SCHEMATHESIS_MAX_TIME seconds (default 150) for the whole run.
# Only the `examples`, `coverage` and `fuzzing` phases run: the stateful phase chains
# operations through links the document does not declare.
#
# The server runs on free loopback ports in a temporary data directory, authenticated with
# the admin's login token (`<data-dir>/admin.token`). A group and a few databases are
# created first; tests/schemathesis/schemathesis.toml makes most generated path
# parameters name them (and the admin's organization), so requests reach the handlers'
# real work rather than stopping at 404. The venv lives in
# ${ATOLL_CACHE_DIR:-$HOME/.cache/atoll}/schemathesis-venv and is reused across runs.
#
# Destructive operations: generated requests run as the instance administrator, so they may
# delete what the admin owns. Revoking API tokens cannot touch the login token the run
# uses (it is not an API token), so those operations stay in. Excluded, with the reason:
#   DELETE /v1/organizations/{org}   with the value "admin" it would delete the admin's
#                                    personal organization, and every later request on it
#                                    would answer 404 instead of exercising the handler.
#   POST /v1/auth/invalidate         revokes every login token of the caller, the run's
#                                    own included: every later request would answer 401
#                                    (it has its own tests in tests/api/security/).
#
# Environment:
#   ATOLL_BIN                      server binary (default $CARGO_TARGET_DIR/debug/atoll or
#                                  target/debug/atoll)
#   ATOLL_SCHEMATHESIS_EXAMPLES    examples per operation (default 25)
#   ATOLL_SCHEMATHESIS_MAX_TIME    time budget in seconds (default 150)
#   ATOLL_SCHEMATHESIS_KEEP=1      keep the data directory, server.log and the report
#   ATOLL_SCHEMATHESIS_PYTHON      Python that creates the venv (default python3)
#   extra arguments                passed to `schemathesis run` (e.g. --include-path-regex groups)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${ATOLL_CACHE_DIR:-$HOME/.cache/atoll}"
VENV="$CACHE_DIR/schemathesis-venv"
REQUIREMENTS="$REPO_ROOT/tests/schemathesis/requirements.txt"
PYTHON="${ATOLL_SCHEMATHESIS_PYTHON:-python3}"
EXAMPLES="${ATOLL_SCHEMATHESIS_EXAMPLES:-25}"
MAX_TIME="${ATOLL_SCHEMATHESIS_MAX_TIME:-150}"
HEALTH_TIMEOUT_S=30

log() { printf 'schemathesis: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

# --- the server binary ---------------------------------------------------------------
if [[ -z "${ATOLL_BIN:-}" ]]; then
  ATOLL_BIN="$REPO_ROOT/target/debug/atoll"
  if [[ ! -x "$ATOLL_BIN" && -n "${CARGO_TARGET_DIR:-}" ]]; then
    ATOLL_BIN="$CARGO_TARGET_DIR/debug/atoll"
  fi
fi
[[ -x "$ATOLL_BIN" ]] || die "no atoll binary at $ATOLL_BIN: run 'cargo build -p atoll' first, or set ATOLL_BIN"

# --- the venv, reinstalled when requirements.txt changes ------------------------------
command -v "$PYTHON" >/dev/null || die "$PYTHON (3.9 or newer) is needed"
mkdir -p "$CACHE_DIR"
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating the virtualenv $VENV"
  "$PYTHON" -m venv "$VENV" >&2 \
    || { rm -rf "$VENV"; die "could not create a virtualenv with $PYTHON -m venv (on Debian/Ubuntu: apt-get install python3-venv)"; }
fi
STAMP="$VENV/.requirements"
if ! cmp -s "$REQUIREMENTS" "$STAMP"; then
  log "installing tests/schemathesis/requirements.txt"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQUIREMENTS" >&2
  cp "$REQUIREMENTS" "$STAMP"
fi

# --- the server ----------------------------------------------------------------------
free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/atoll-schemathesis.XXXXXX")"
API_PORT="$(free_port)"
DB_PORT="$(free_port)"
API_URL="http://127.0.0.1:$API_PORT"
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [[ "${ATOLL_SCHEMATHESIS_KEEP:-}" == 1 ]]; then
    log "kept $WORK_DIR"
  else
    rm -rf "$WORK_DIR"
  fi
}
trap cleanup EXIT

log "starting atoll dev on $API_URL (data dir $WORK_DIR/data)"
"$ATOLL_BIN" dev --data-dir "$WORK_DIR/data" \
  --listen "127.0.0.1:$API_PORT" --db-listen "127.0.0.1:$DB_PORT" \
  >"$WORK_DIR/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq $((HEALTH_TIMEOUT_S * 10))); do
  if curl -fsS "$API_URL/health" >/dev/null 2>&1; then break; fi
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK_DIR/server.log" >&2; die "atoll dev exited"; }
  sleep 0.1
done
curl -fsS "$API_URL/health" >/dev/null || { cat "$WORK_DIR/server.log" >&2; die "atoll dev did not answer /health in ${HEALTH_TIMEOUT_S}s"; }
TOKEN="$(tr -d '\n' <"$WORK_DIR/data/admin.token")"

# What tests/schemathesis/schemathesis.toml names, so generated requests find it.
seed() {
  curl -fsS -o /dev/null -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d "$2" "$API_URL$1" || die "setting up $1 failed"
}
seed /v1/groups '{"name": "st-group", "location": "local"}'
seed /v1/databases '{"name": "st-db"}'
seed /v1/databases '{"name": "st-other", "group": "st-group"}'
seed /v1/databases '{"name": "st-upload", "seed": {"type": "database_upload"}}'

# --- the run -------------------------------------------------------------------------
log "running schemathesis: $EXAMPLES examples per operation, at most ${MAX_TIME}s"
status=0
cd "$WORK_DIR"
"$VENV/bin/schemathesis" --config-file "$REPO_ROOT/tests/schemathesis/schemathesis.toml" \
  run "$API_URL/openapi.json" \
  --header "Authorization: Bearer $TOKEN" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --phases examples,coverage,fuzzing \
  --max-examples "$EXAMPLES" \
  --max-time "$MAX_TIME" \
  --workers 2 \
  --seed "${ATOLL_SCHEMATHESIS_SEED:-20261122}" \
  --no-color \
  --suppress-health-check all \
  --exclude-operation-id delete_v1_organizations_org \
  --exclude-operation-id post_v1_auth_invalidate \
  --generation-database none \
  --report junit --report-dir "$WORK_DIR/report" \
  "$@" || status=$?
if (( status != 0 )); then
  log "failed (exit $status); the server's log (without the admin's secrets):"
  grep -v -E 'Password|Token|Try: curl' "$WORK_DIR/server.log" | tail -n 50 >&2 || true
fi
exit "$status"
