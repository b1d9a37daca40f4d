#!/usr/bin/env bash
# Runs the README's ```sh blocks, in order, against one fresh `atoll dev`: the check that
# a new user can follow the README top to bottom.
#
#   cargo build -p atoll && scripts/readme.sh
#
# How:
# - a temporary directory is the working directory (the README's `atoll-data/` lands
#   there), with its own HOME and ATOLL_CONFIG_DIR, so nothing of yours is read or changed;
# - `atoll dev` runs there on free loopback ports; the README's 127.0.0.1:8080 and :8081
#   are rewritten to them (and ATOLL_API_URL points the CLI at the API), so a server
#   already on 8080 does not get in the way;
# - $ATOLL_BIN's directory is first on PATH, so `atoll` is the binary under test;
# - every block runs in one bash (`set -euo pipefail`), so variables carry over from block
#   to block as they do for a reader in one terminal; `curl` fails on HTTP errors
#   (`--fail-with-body`), so a 409 from re-creating something is a failure, not a line of
#   JSON nobody reads;
# - then the ```js blocks, each as an ES module (`.mjs`) with TOKEN set to the admin's
#   login token, when the official clients are installed in tests/compat/node_modules
#   (`scripts/compat.sh`, which scripts/test.sh runs first, installs them); otherwise the
#   script says it skipped them;
# - a block right after the line `<!-- readme-test: skip -->` is not run (an interactive
#   shell, `cargo run` itself); the script lists what it skipped.
#
# Environment:
#   ATOLL_BIN            the binary, default $CARGO_TARGET_DIR/debug/atoll or target/debug/atoll
#   ATOLL_README         the file to run, default README.md at the repository root
#   ATOLL_README_KEEP=1  keep the temporary directory (and dev.log)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
README="${ATOLL_README:-$REPO_ROOT/README.md}"
ATOLL_BIN="${ATOLL_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/atoll}"
[[ -x "$ATOLL_BIN" ]] || { echo "readme: no atoll binary at $ATOLL_BIN: run 'cargo build -p atoll' or set ATOLL_BIN" >&2; exit 2; }
ATOLL_BIN="$(cd "$(dirname "$ATOLL_BIN")" && pwd)/$(basename "$ATOLL_BIN")"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/atoll-readme.XXXXXX")"
DEV_PID=""
cleanup() {
  if [[ -n "$DEV_PID" ]]; then
    kill "$DEV_PID" 2>/dev/null || true
    wait "$DEV_PID" 2>/dev/null || true
  fi
  if [[ "${ATOLL_README_KEEP:-}" == 1 ]]; then
    echo "readme: kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
API_PORT="$(free_port)"
DB_PORT="$(free_port)"
while [[ "$DB_PORT" == "$API_PORT" ]]; do DB_PORT="$(free_port)"; done

# The blocks, as one script, and the list of the skipped ones.
python3 - "$README" "$API_PORT" "$DB_PORT" "$WORK/readme-blocks.sh" <<'PY'
import os, re, sys
readme, api_port, db_port, out = sys.argv[1:]
lines = open(readme, encoding="utf-8").read().split("\n")
script = []
i = 0
number = 0
previous = ""
while i < len(lines):
    line = lines[i]
    fence = re.match(r"^```(\S*)\s*$", line)
    if not fence:
        if line.strip():
            previous = line.strip()
        i += 1
        continue
    language, start = fence.group(1), i + 1
    end = start
    while end < len(lines) and lines[end].strip() != "```":
        end += 1
    body = lines[start:end]
    i = end + 1
    skip_marked = previous == "<!-- readme-test: skip -->"
    previous = ""
    if language not in ("sh", "js"):
        continue
    number += 1
    where = f"README block {number} (line {start})"
    if skip_marked:
        print(f"readme: skipped {where}: {body[0].strip() if body else ''}", file=sys.stderr)
        continue
    text = "\n".join(body)
    text = text.replace("127.0.0.1:8080", f"127.0.0.1:{api_port}")
    text = text.replace("127.0.0.1:8081", f"127.0.0.1:{db_port}")
    if language == "js":
        modules = os.path.join(os.path.dirname(out), "js")
        os.makedirs(modules, exist_ok=True)
        with open(os.path.join(modules, f"block-{number}-line-{start}.mjs"), "w", encoding="utf-8") as f:
            f.write(text + "\n")
        continue
    # A newline first: the previous command's output (curl's JSON) may not end with one.
    script.append(f"printf '\\n==> {where}\\n' >&2\n{text}\n")
with open(out, "w", encoding="utf-8") as f:
    f.write("set -euo pipefail\n")
    f.write('curl() { command curl --fail-with-body "$@"; }\n')
    f.write("\n".join(script))
PY

mkdir -p "$WORK/home" "$WORK/config"
cd "$WORK"
export HOME="$WORK/home" ATOLL_CONFIG_DIR="$WORK/config"
unset XDG_CONFIG_HOME ATOLL_API_TOKEN ATOLL_PASSWORD ATOLL_DATA_DIR ATOLL_LISTEN ATOLL_DB_LISTEN
export PATH="$(dirname "$ATOLL_BIN"):$PATH"

"$ATOLL_BIN" dev --listen "127.0.0.1:$API_PORT" --db-listen "127.0.0.1:$DB_PORT" >"$WORK/dev.log" 2>&1 &
DEV_PID=$!
for _ in $(seq 1 300); do
  if command curl -sf "http://127.0.0.1:$API_PORT/health" >/dev/null 2>&1; then break; fi
  kill -0 "$DEV_PID" 2>/dev/null || { cat "$WORK/dev.log" >&2; echo "readme: atoll dev exited" >&2; exit 1; }
  sleep 0.1
done
command curl -sf "http://127.0.0.1:$API_PORT/health" >/dev/null || { echo "readme: atoll dev did not become healthy" >&2; exit 1; }

export ATOLL_API_URL="http://127.0.0.1:$API_PORT"
if bash "$WORK/readme-blocks.sh" </dev/null >"$WORK/blocks.log" 2>&1; then
  grep '^==> README block' "$WORK/blocks.log" | sed 's/^==> /readme: ran /' >&2
else
  status=$?
  cat "$WORK/blocks.log" >&2
  echo "readme: a block failed (exit $status); its output is above, after its '==> README block' line" >&2
  exit 1
fi

# The JavaScript blocks, with the official clients the compatibility tests install.
MODULES="$REPO_ROOT/tests/compat/node_modules"
for block in "$WORK"/js/*.mjs; do
  [[ -e "$block" ]] || continue
  name="$(basename "$block" .mjs)"
  if ! command -v node >/dev/null || [[ ! -d "$MODULES/@libsql/client" || ! -d "$MODULES/@tursodatabase/api" ]]; then
    echo "readme: skipped $name (JavaScript): no node, or no official clients in tests/compat/node_modules (scripts/compat.sh installs them)" >&2
    continue
  fi
  ln -sfn "$MODULES" "$WORK/js/node_modules"
  if TOKEN="$(cat atoll-data/admin.token)" timeout 60 node "$block" >"$WORK/$name.log" 2>&1; then
    echo "readme: ran $name (JavaScript, as .mjs)" >&2
  else
    cat "$WORK/$name.log" >&2
    echo "readme: $name (JavaScript) failed" >&2
    exit 1
  fi
done
echo "readme: every block ran" >&2
