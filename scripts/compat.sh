#!/usr/bin/env bash
# Compatibility tests: drive a real `atoll dev` with official clients.
#
#   1. node:   tests/compat/*.test.mjs with Node's built-in test runner: the platform SDK
#              (@tursodatabase/api) and the libSQL client (@libsql/client, over HTTP);
#   2. python: tests/compat-python/test_*.py with unittest: the Python libSQL client
#              (libsql-client, over HTTP), in a virtualenv at tests/compat-python/.venv.
#
#   cargo build -p atoll && scripts/compat.sh
#
# Builds nothing but the tests' dependencies (`npm ci` in tests/compat; a venv and
# `pip install -r requirements.txt` in tests/compat-python). The server binary is
# $ATOLL_BIN, by default target/debug/atoll under the repository root, or
# $CARGO_TARGET_DIR/debug/atoll when CARGO_TARGET_DIR is set. The server (platform API and
# data plane) runs on free loopback ports with a fresh data directory; both suites run
# against the same server, which is stopped when the script exits. The script exits
# non-zero when either suite fails, and says which.
#
# Environment:
#   ATOLL_BIN             server binary (see above)
#   ATOLL_COMPAT_KEEP=1   keep the temporary data directory (and its server.log)
#   ATOLL_COMPAT_SUITES   the suites to run, default "node python"
#   ATOLL_COMPAT_PYTHON   the Python that creates the venv, default python3
#   extra arguments       passed to `node --test` (e.g. --test-name-pattern=groups)
#
# The tests get ATOLL_URL (platform API), ATOLL_DB_URL (data plane), ATOLL_TOKEN (the
# admin's login token) and ATOLL_PASSWORD. A second `atoll dev` runs with TLS on both
# listeners (a self-signed certificate made with openssl for 127.0.0.1 and localhost):
# ATOLL_TLS_URL and ATOLL_TLS_TOKEN, and NODE_EXTRA_CA_CERTS trusts its certificate.
# Without openssl that server is not started and its tests say they are skipped.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
COMPAT_DIR="$REPO_ROOT/tests/compat"
PY_DIR="$REPO_ROOT/tests/compat-python"
HEALTH_TIMEOUT_S=30
SUITES="${ATOLL_COMPAT_SUITES:-node python}"
PYTHON="${ATOLL_COMPAT_PYTHON:-python3}"

want() { [[ " $SUITES " == *" $1 "* ]]; }

log() { printf 'compat: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

# --- the server binary ---------------------------------------------------------------
if [[ -z "${ATOLL_BIN:-}" ]]; then
  ATOLL_BIN="$REPO_ROOT/target/debug/atoll"
  if [[ ! -x "$ATOLL_BIN" && -n "${CARGO_TARGET_DIR:-}" ]]; then
    ATOLL_BIN="$CARGO_TARGET_DIR/debug/atoll"
  fi
fi
[[ -x "$ATOLL_BIN" ]] || die "no atoll binary at $ATOLL_BIN: run 'cargo build -p atoll' first, or set ATOLL_BIN"

for suite in $SUITES; do
  [[ "$suite" == node || "$suite" == python ]] || die "unknown suite '$suite' in ATOLL_COMPAT_SUITES (node, python)"
done

# --- node and the SDKs (node also runs the helpers below, so it is always needed) ----
command -v node >/dev/null || die "node (20 or newer) is needed"
command -v npm >/dev/null || die "npm is needed"
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
(( NODE_MAJOR >= 20 )) || die "node 20 or newer is needed, found $(node --version)"

if want node; then
  log "installing the test's npm packages in tests/compat"
  if [[ -f "$COMPAT_DIR/package-lock.json" ]]; then
    (cd "$COMPAT_DIR" && npm ci --no-audit --no-fund --loglevel=error) >&2
  else
    (cd "$COMPAT_DIR" && npm install --no-audit --no-fund --loglevel=error) >&2
  fi
fi

# --- python and its client -------------------------------------------------------------
PY_VENV="$PY_DIR/.venv"
if want python; then
  command -v "$PYTHON" >/dev/null || die "$PYTHON (3.8 or newer) is needed for the Python suite (or set ATOLL_COMPAT_SUITES=node)"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 8))' \
    || die "Python 3.8 or newer is needed, found $("$PYTHON" --version 2>&1)"
  if [[ ! -x "$PY_VENV/bin/python" ]]; then
    log "creating the virtualenv tests/compat-python/.venv"
    "$PYTHON" -m venv "$PY_VENV" >&2 \
      || { rm -rf "$PY_VENV"; die "could not create a virtualenv with $PYTHON -m venv (on Debian/Ubuntu: apt-get install python3-venv)"; }
  fi
  log "installing the test's Python packages in tests/compat-python/.venv"
  "$PY_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$PY_DIR/requirements.txt" >&2 || die "pip install -r tests/compat-python/requirements.txt failed"
fi

# --- start the server ----------------------------------------------------------------
DATA_DIR="$(mktemp -d "${TMPDIR:-/tmp}/atoll-compat.XXXXXX")"
SERVER_LOG="$DATA_DIR/server.log"
SERVER_PID=""
TLS_SERVER_PID=""
TEST_PID=""

stop_process() {
  local pid="$1"
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}

cleanup() {
  local status=$?
  if [[ -n "$TEST_PID" ]] && kill -0 "$TEST_PID" 2>/dev/null; then
    kill "$TEST_PID" 2>/dev/null || true
    wait "$TEST_PID" 2>/dev/null || true
  fi
  stop_process "$SERVER_PID"
  stop_process "$TLS_SERVER_PID"
  if [[ "${ATOLL_COMPAT_KEEP:-}" == 1 ]]; then
    log "kept the data directory $DATA_DIR"
  else
    rm -rf "$DATA_DIR"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  node -e '
    const s = require("net").createServer();
    s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

healthy() {
  node -e '
    fetch(process.argv[1], { signal: AbortSignal.timeout(2000) })
      .then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1));' "$1/health"
}

# The server's own settings come from the flags below, never from the caller's
# environment (its ATOLL_PASSWORD, say, would change the admin password).
start_server() {
  local port="$1" db_port="$2"
  env -u ATOLL_USERNAME -u ATOLL_PASSWORD -u ATOLL_LOCATIONS -u ATOLL_LOCATION \
      -u ATOLL_DATA_DIR -u ATOLL_LISTEN -u ATOLL_DB_LISTEN \
      -u ATOLL_SECRETS_KEY -u ATOLL_SECRETS_KEY_FILE -u ATOLL_PREVIOUS_SECRETS_KEYS \
    "$ATOLL_BIN" dev \
      --data-dir "$DATA_DIR/data" \
      --listen "127.0.0.1:$port" \
      --db-listen "127.0.0.1:$db_port" \
      >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!
}

# Waits for /health; fails when the server exits or the timeout passes.
wait_healthy() {
  local url="$1" deadline=$((SECONDS + HEALTH_TIMEOUT_S))
  while (( SECONDS < deadline )); do
    kill -0 "$SERVER_PID" 2>/dev/null || return 1
    healthy "$url" && return 0
    sleep 0.2
  done
  return 2
}

ATOLL_URL=""
ATOLL_DB_URL=""
for attempt in 1 2 3; do
  PORT="$(free_port)"
  DB_PORT="$(free_port)"
  rm -rf "$DATA_DIR/data"
  log "starting $ATOLL_BIN dev on 127.0.0.1:$PORT (attempt $attempt)"
  start_server "$PORT" "$DB_PORT"
  if wait_healthy "http://127.0.0.1:$PORT"; then
    ATOLL_URL="http://127.0.0.1:$PORT"
    ATOLL_DB_URL="http://127.0.0.1:$DB_PORT"
    break
  else
    rc=$?
  fi
  if (( rc == 2 )); then
    log "server log:"; cat "$SERVER_LOG" >&2
    die "server not healthy after ${HEALTH_TIMEOUT_S}s"
  fi
  # The server exited: most likely the port was taken in between; try another one.
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  log "server exited early:"; cat "$SERVER_LOG" >&2
done
[[ -n "$ATOLL_URL" ]] || die "could not start the server"

[[ -s "$DATA_DIR/data/admin.token" ]] || die "the server wrote no $DATA_DIR/data/admin.token"
[[ -s "$DATA_DIR/data/admin.password" ]] || die "the server wrote no $DATA_DIR/data/admin.password"
ATOLL_TOKEN="$(tr -d '[:space:]' <"$DATA_DIR/data/admin.token")"
ATOLL_PASSWORD="$(tr -d '[:space:]' <"$DATA_DIR/data/admin.password")"
export ATOLL_URL ATOLL_DB_URL ATOLL_TOKEN ATOLL_PASSWORD
# The data plane starts with the platform API; make sure it answers too.
healthy "$ATOLL_DB_URL" || { log "server log:"; cat "$SERVER_LOG" >&2; die "the data plane at $ATOLL_DB_URL does not answer /health"; }
log "server ready at $ATOLL_URL, data plane at $ATOLL_DB_URL (log: $SERVER_LOG)"

# --- a second server, with TLS ---------------------------------------------------------
TLS_DIR="$DATA_DIR/tls"
TLS_LOG="$DATA_DIR/server-tls.log"
ATOLL_TLS_URL=""
ATOLL_TLS_TOKEN=""
if want node && command -v openssl >/dev/null; then
  mkdir -p "$TLS_DIR"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$TLS_DIR/key.pem" -out "$TLS_DIR/cert.pem" 2>/dev/null \
    || die "openssl could not make a test certificate"
  # Node reads it at start: every node process below trusts the test certificate.
  export NODE_EXTRA_CA_CERTS="$TLS_DIR/cert.pem"
  for attempt in 1 2 3; do
    TLS_PORT="$(free_port)"
    TLS_DB_PORT="$(free_port)"
    rm -rf "$TLS_DIR/data"
    log "starting $ATOLL_BIN dev with TLS on 127.0.0.1:$TLS_PORT (attempt $attempt)"
    env -u ATOLL_USERNAME -u ATOLL_PASSWORD -u ATOLL_LOCATIONS -u ATOLL_LOCATION \
        -u ATOLL_DATA_DIR -u ATOLL_LISTEN -u ATOLL_DB_LISTEN \
      "$ATOLL_BIN" dev \
        --data-dir "$TLS_DIR/data" \
        --listen "127.0.0.1:$TLS_PORT" \
        --db-listen "127.0.0.1:$TLS_DB_PORT" \
        --tls-cert "$TLS_DIR/cert.pem" \
        --tls-key "$TLS_DIR/key.pem" \
        >"$TLS_LOG" 2>&1 &
    TLS_SERVER_PID=$!
    deadline=$((SECONDS + HEALTH_TIMEOUT_S))
    while (( SECONDS < deadline )) && kill -0 "$TLS_SERVER_PID" 2>/dev/null; do
      if healthy "https://127.0.0.1:$TLS_PORT"; then
        ATOLL_TLS_URL="https://127.0.0.1:$TLS_PORT"
        break
      fi
      sleep 0.2
    done
    [[ -n "$ATOLL_TLS_URL" ]] && break
    stop_process "$TLS_SERVER_PID"
    TLS_SERVER_PID=""
    log "the TLS server did not start:"; cat "$TLS_LOG" >&2
  done
  [[ -n "$ATOLL_TLS_URL" ]] || die "could not start the server with TLS"
  ATOLL_TLS_TOKEN="$(tr -d '[:space:]' <"$TLS_DIR/data/admin.token")"
  log "server with TLS ready at $ATOLL_TLS_URL (log: $TLS_LOG)"
elif want node; then
  log "WARNING: no openssl: the TLS tests of the node suite are skipped"
fi
export ATOLL_TLS_URL ATOLL_TLS_TOKEN

# --- run the tests -------------------------------------------------------------------
# Each suite runs in the background and is waited for, so that a signal to this script runs
# the clean-up at once (stopping the tests and the server) instead of after the tests end.
run_suite() {
  "$@" &
  TEST_PID=$!
  set +e
  wait "$TEST_PID"
  local status=$?
  set -e
  TEST_PID=""
  return "$status"
}

FAILED=()
STATUS=0

if want node; then
  # The test files are listed explicitly (rather than handing node the directory) so that
  # node_modules is never searched and every Node version reads the arguments the same way.
  mapfile -t TEST_FILES < <(cd "$REPO_ROOT" && find tests/compat -path tests/compat/node_modules -prune \
    -o -type f -name '*.test.mjs' -print | sort)
  (( ${#TEST_FILES[@]} > 0 )) || die "no *.test.mjs files in tests/compat"
  log "node suite: ${TEST_FILES[*]}"
  node_status=0
  run_suite bash -c 'cd "$1" && shift && exec node --test "$@"' _ "$REPO_ROOT" "$@" "${TEST_FILES[@]}" \
    || node_status=$?
  if (( node_status != 0 )); then
    log "node suite failed (status $node_status)"
    FAILED+=(node)
    STATUS=$node_status
  fi
fi

if want python; then
  log "python suite: tests/compat-python (unittest)"
  py_status=0
  run_suite bash -c 'cd "$1" && exec "$2" -m unittest discover -v -s . -p "test_*.py"' \
    _ "$PY_DIR" "$PY_VENV/bin/python" || py_status=$?
  if (( py_status != 0 )); then
    log "python suite failed (status $py_status)"
    FAILED+=(python)
    (( STATUS != 0 )) || STATUS=$py_status
  fi
fi

if (( ${#FAILED[@]} > 0 )); then
  log "FAILED suites: ${FAILED[*]}; last lines of the server log:"
  tail -n 40 "$SERVER_LOG" >&2 || true
else
  log "all suites passed: $SUITES"
fi
exit "$STATUS"
