#!/usr/bin/env bash
# Times `db create --from-dump` through the API: writes a 200,000-INSERT dump (13 MB),
# starts `atoll dev` on two loopback ports, uploads the dump (POST …/databases/dumps) and
# creates a database from it. Prints both times; the server's "dump loaded" log line gives
# the load itself. docs/PERFORMANCE.md, "Dump loads", reports what it measured.
#
#   scripts/time-dump-load.sh [path/to/atoll] [rows]
set -euo pipefail
BIN=${1:-target/debug/atoll}
ROWS=${2:-200000}
WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
python3 - "$WORK/dump.sql" "$ROWS" <<'PY'
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as f:
    f.write("PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n")
    f.write("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, note TEXT);\n")
    for i in range(int(sys.argv[2])):
        f.write(f"INSERT INTO items VALUES({i},'item {i} {random.randrange(10**9)}',{random.random()*100:.4f},'n');\n")
    f.write("COMMIT;\n")
PY
PORT=${ATOLL_TIMING_PORT:-27480}
"$BIN" dev --data-dir "$WORK/data" --listen "127.0.0.1:$PORT" --db-listen "127.0.0.1:$((PORT + 1))" \
  > "$WORK/log" 2>&1 &
PID=$!
for _ in $(seq 100); do
  [ -s "$WORK/data/admin.token" ] && curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
  sleep 0.2
done
TOKEN=$(cat "$WORK/data/admin.token")
API="http://127.0.0.1:$PORT/v1/organizations/admin/databases"
start=$(date +%s.%N)
URL=$(curl -sf -H "Authorization: Bearer $TOKEN" -F "file=@$WORK/dump.sql" "$API/dumps" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["dump_url"])')
uploaded=$(date +%s.%N)
curl -sf -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  -d "{\"name\": \"dumped\", \"group\": \"default\", \"seed\": {\"type\": \"dump\", \"url\": \"$URL\"}}" \
  "$API" > /dev/null
created=$(date +%s.%N)
echo "dump: $(stat -c %s "$WORK/dump.sql") bytes, $ROWS INSERTs"
echo "upload: $(echo "$uploaded - $start" | bc) s; create from it: $(echo "$created - $uploaded" | bc) s"
grep -a "dump loaded" "$WORK/log" | sed 's/\x1b\[[0-9;]*m//g' || true
