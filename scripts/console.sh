#!/usr/bin/env bash
# Browser tests of the web console: Debian's chromium, headless, driven by playwright-core
# (tests/console/*.test.mjs, Node's test runner) against a fresh `atoll dev`.
#
#   cargo build -p atoll && scripts/console.sh
#
# Installs what it needs: chromium from Debian's packages when /usr/bin/chromium is missing
# (apt-get, as root or with sudo), and the tests' npm packages (`npm ci` in tests/console;
# playwright-core never downloads a browser of its own). Screenshots of the main pages go
# to tests/console/screenshots/ (git-ignored).
#
# Environment:
#   ATOLL_BIN             server binary (default target/debug/atoll, or
#                         $CARGO_TARGET_DIR/debug/atoll)
#   CHROMIUM              the browser (default /usr/bin/chromium)
#   ATOLL_CONSOLE_KEEP=1  keep the temporary data directory (and its server.log)
#   extra arguments       passed to `node --test` (e.g. --test-name-pattern=viewer)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TEST_DIR="$REPO_ROOT/tests/console"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
HEALTH_TIMEOUT_S=30

log() { printf 'console: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

if [[ -z "${ATOLL_BIN:-}" ]]; then
  ATOLL_BIN="$REPO_ROOT/target/debug/atoll"
  if [[ ! -x "$ATOLL_BIN" && -n "${CARGO_TARGET_DIR:-}" ]]; then
    ATOLL_BIN="$CARGO_TARGET_DIR/debug/atoll"
  fi
fi
[[ -x "$ATOLL_BIN" ]] || die "no atoll binary at $ATOLL_BIN: run 'cargo build -p atoll' first, or set ATOLL_BIN"

# --- the browser -----------------------------------------------------------------------
if [[ ! -x "$CHROMIUM" ]]; then
  command -v apt-get >/dev/null || die "no $CHROMIUM and no apt-get to install it: install chromium, or set CHROMIUM"
  SUDO=""
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || die "installing chromium needs root (or sudo)"
    SUDO="sudo"
  fi
  log "installing chromium from Debian's packages"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >&2
fi
[[ -x "$CHROMIUM" ]] || die "no browser at $CHROMIUM"
log "browser: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"

# --- node and playwright-core ------------------------------------------------------------
command -v node >/dev/null || die "node (20 or newer) is needed"
command -v npm >/dev/null || die "npm is needed"
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
(( NODE_MAJOR >= 20 )) || die "node 20 or newer is needed, found $(node --version)"
log "installing the test's npm packages in tests/console"
(cd "$TEST_DIR" && npm ci --no-audit --no-fund --loglevel=error) >&2

# --- the server ------------------------------------------------------------------------
DATA_DIR="$(mktemp -d "${TMPDIR:-/tmp}/atoll-console.XXXXXX")"
SERVER_LOG="$DATA_DIR/server.log"
SERVER_PID=""
TEST_PID=""

cleanup() {
  local status=$?
  if [[ -n "$TEST_PID" ]] && kill -0 "$TEST_PID" 2>/dev/null; then
    kill "$TEST_PID" 2>/dev/null || true
    wait "$TEST_PID" 2>/dev/null || true
  fi
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [[ "${ATOLL_CONSOLE_KEEP:-}" == 1 ]]; then
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

ATOLL_URL=""
for attempt in 1 2 3; do
  PORT="$(free_port)"
  DB_PORT="$(free_port)"
  rm -rf "$DATA_DIR/data"
  log "starting $ATOLL_BIN dev on 127.0.0.1:$PORT (attempt $attempt)"
  # The server's settings come from these flags, never from the caller's environment.
  env -u ATOLL_USERNAME -u ATOLL_PASSWORD -u ATOLL_LOCATIONS -u ATOLL_LOCATION \
      -u ATOLL_DATA_DIR -u ATOLL_LISTEN -u ATOLL_DB_LISTEN \
      -u ATOLL_SECRETS_KEY -u ATOLL_SECRETS_KEY_FILE -u ATOLL_PREVIOUS_SECRETS_KEYS \
    "$ATOLL_BIN" dev \
      --data-dir "$DATA_DIR/data" \
      --listen "127.0.0.1:$PORT" \
      --db-listen "127.0.0.1:$DB_PORT" \
      >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!
  deadline=$((SECONDS + HEALTH_TIMEOUT_S))
  while (( SECONDS < deadline )) && kill -0 "$SERVER_PID" 2>/dev/null; do
    if healthy "http://127.0.0.1:$PORT"; then
      ATOLL_URL="http://127.0.0.1:$PORT"
      break
    fi
    sleep 0.2
  done
  [[ -n "$ATOLL_URL" ]] && break
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    log "server log:"; cat "$SERVER_LOG" >&2
    die "server not healthy after ${HEALTH_TIMEOUT_S}s"
  fi
  # The server exited: most likely the port was taken in between; try another one.
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  log "server exited early:"; cat "$SERVER_LOG" >&2
done
[[ -n "$ATOLL_URL" ]] || die "could not start the server"
ATOLL_DB_URL="http://127.0.0.1:$DB_PORT"
ATOLL_TOKEN="$(tr -d '[:space:]' <"$DATA_DIR/data/admin.token")"
ATOLL_PASSWORD="$(tr -d '[:space:]' <"$DATA_DIR/data/admin.password")"
SCREENSHOTS="$TEST_DIR/screenshots"
# The data directory, for tests that plant history in the metadata store (meta.db).
ATOLL_DATA_DIR="$DATA_DIR/data"
export ATOLL_URL ATOLL_DB_URL ATOLL_TOKEN ATOLL_PASSWORD ATOLL_DATA_DIR CHROMIUM SCREENSHOTS
log "server ready at $ATOLL_URL, data plane at $ATOLL_DB_URL (log: $SERVER_LOG)"

# --- the tests -------------------------------------------------------------------------
mapfile -t TEST_FILES < <(cd "$REPO_ROOT" && find tests/console -path tests/console/node_modules -prune \
  -o -type f -name '*.test.mjs' -print | sort)
(( ${#TEST_FILES[@]} > 0 )) || die "no *.test.mjs files in tests/console"
set +e
# The tests share one server and run in order (each test makes what it needs).
bash -c 'cd "$1" && shift && exec node --test --test-concurrency=1 "$@"' _ "$REPO_ROOT" "$@" "${TEST_FILES[@]}" &
TEST_PID=$!
wait "$TEST_PID"
STATUS=$?
TEST_PID=""
set -e
if (( STATUS != 0 )); then
  log "the browser tests failed; last lines of the server log:"
  tail -n 40 "$SERVER_LOG" >&2 || true
else
  log "all browser tests passed; screenshots in tests/console/screenshots/"
fi
exit "$STATUS"
