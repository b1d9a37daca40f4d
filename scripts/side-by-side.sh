#!/usr/bin/env bash
# The data plane measured from outside with wrk, Atoll beside sqld when one is given:
#
#   ATOLL_BIN=target/release/atoll [SQLD_BIN=/path/to/sqld] scripts/side-by-side.sh
#
# Both servers get the same request bodies over HTTP/1.1 on loopback: a point select of a
# random row of a 100,000-row table over `/v2/pipeline` (1, 16 and 64 connections), a
# single-row insert (64 connections), and the server's cheapest answer (`GET /health` of
# the data plane, 1 and 64 connections) as the floor a request costs on this machine.
# Atoll runs `atoll dev` with a database token; sqld runs one database without
# authentication. Prints a Markdown
# table (PERFORMANCE.md, "Side by side with sqld"), with each server's RSS after the
# select/insert figures and again after IDLE seconds of rest, and the latency of CREATES
# (default 100) sequential creates (Atoll: `POST …/databases`; sqld: `POST
# /v1/namespaces/{name}/create` of its admin API, sqld running multi-tenant with
# --enable-namespaces). Never part of CI: the figures depend on the machine, and sqld is
# not built by the repository (PERFORMANCE.md says how it was built for the published
# figures).
#
# The spread workload (issue 31, PERFORMANCE.md "Many tenants at once"): SPREAD databases
# (a list, default 2000; SPREAD=0 skips it) of one 10-row table each, the same on both
# servers (Atoll: databases of one group copied from the first, one group token; sqld:
# namespaces), then point selects on one of them and, each request on a random one of
# them, uniform and Zipf (s = 1.1), on 1 and 64 connections, each beside the one-database
# figure of the same process; each server's RSS and open files after.
#
# Needs wrk (Debian: `apt-get install wrk`), curl and python3. DURATION (default 10 s)
# sets each figure's length; IDLE (default 45 s) how long each server rests before its
# resident memory is read a second time.
set -euo pipefail

ATOLL_BIN="${ATOLL_BIN:-target/release/atoll}"
DURATION="${DURATION:-10}"
# Seconds both servers are left idle after the select/insert figures before their RSS is
# read again (Atoll closes connections unused for 30 s and then gives the memory back).
IDLE="${IDLE:-45}"
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 2; }
[ -x "$ATOLL_BIN" ] || { echo "no Atoll binary at $ATOLL_BIN (cargo build --release)" >&2; exit 2; }

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_up() {
  for _ in $(seq 1 100); do
    curl -fs "$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$1 did not come up" >&2
  exit 1
}

# The seed as one pipeline of one statement per request; fails on any error result.
SEED='{"requests":[
  {"type":"execute","stmt":{"sql":"CREATE TABLE kv (id INTEGER PRIMARY KEY, v TEXT)"}},
  {"type":"execute","stmt":{"sql":"CREATE TABLE ins (id INTEGER PRIMARY KEY, v TEXT)"}},
  {"type":"execute","stmt":{"sql":"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) INSERT INTO kv SELECT x, hex(randomblob(16)) FROM c"}},
  {"type":"close"}]}'
seed() { # url [curl args…]
  local url=$1
  shift
  curl -fsS "$@" -H 'Content-Type: application/json' "$url" -d "$SEED" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["results"]; bad=[x for x in r if x["type"]!="ok"]; sys.exit(f"seed failed: {bad}" if bad else 0)'
}

# wrk scripts: a random id per request, the same insert every time.
cat >"$WORK/select.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if os.getenv("TOKEN") ~= "" then wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN") end
if os.getenv("NAMESPACE") ~= "" then wrk.headers["x-namespace"] = os.getenv("NAMESPACE") end
request = function()
  local id = math.random(1, 100000)
  local body = '{"requests":[{"type":"execute","stmt":{"sql":"SELECT v FROM kv WHERE id = ?","args":[{"type":"integer","value":"' .. id .. '"}]}},{"type":"close"}]}'
  return wrk.format(nil, nil, nil, body)
end
EOF
# The floor carries the same credential as the queries: Atoll limits the rate of requests
# without one per address (every request of wrk comes from one), and a request with one
# passes the same admission as a query.
cat >"$WORK/health.lua" <<'EOF'
if os.getenv("TOKEN") ~= "" then wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN") end
EOF
cat >"$WORK/insert.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if os.getenv("TOKEN") ~= "" then wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN") end
if os.getenv("NAMESPACE") ~= "" then wrk.headers["x-namespace"] = os.getenv("NAMESPACE") end
wrk.body = '{"requests":[{"type":"execute","stmt":{"sql":"INSERT INTO ins (v) VALUES (\'a value of some length\')"}},{"type":"close"}]}'
EOF

# The spread workload's requests: a point select on database number pick() of SPREAD_N,
# addressed by its own path (Atoll) or by the x-namespace header (sqld). The draws come
# from LuaJIT's unseeded generator: both servers get the same sequence.
cat >"$WORK/spread.lua" <<'EOF'
local n = tonumber(os.getenv("SPREAD_N"))
local server = os.getenv("SPREAD_SERVER")
local token = os.getenv("TOKEN")
local cdf = nil
if os.getenv("SPREAD_DIST") == "zipf" then
  -- Database k is drawn with a weight of k^-1.1.
  cdf = {}
  local total = 0
  for k = 1, n do total = total + k ^ -1.1; cdf[k] = total end
  for k = 1, n do cdf[k] = cdf[k] / total end
end
local function pick()
  if cdf == nil then return math.random(1, n) end
  local u, lo, hi = math.random(), 1, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return lo
end
request = function()
  local body = '{"requests":[{"type":"execute","stmt":{"sql":"SELECT v FROM kv WHERE id = ?","args":[{"type":"integer","value":"' .. math.random(1, 10) .. '"}]}},{"type":"close"}]}'
  local headers = { ["Content-Type"] = "application/json" }
  local db = pick()
  if server == "sqld" then
    headers["x-namespace"] = "s" .. db
    return wrk.format("POST", "/v2/pipeline", headers, body)
  end
  headers["Authorization"] = "Bearer " .. token
  return wrk.format("POST", "/db/s" .. db .. "-admin/v2/pipeline", headers, body)
end
EOF
SPREAD="${SPREAD:-2000}"
SPREAD_SEED='{"requests":[
  {"type":"execute","stmt":{"sql":"CREATE TABLE IF NOT EXISTS kv (id INTEGER PRIMARY KEY, v TEXT)"}},
  {"type":"execute","stmt":{"sql":"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10) INSERT OR REPLACE INTO kv SELECT x, hex(randomblob(16)) FROM c"}},
  {"type":"close"}]}'

# Runs the spread figures against one server: $1 name, $2 base URL, $3 pid, $4 token, $5 a
# command that creates databases s$from..s$to (given as its two arguments) and seeds
# them, s1 first. Each count in SPREAD adds databases to those of the count before.
run_spread() {
  local name=$1 base=$2 pid=$3 create=$5 made=0
  export TOKEN=$4 SPREAD_SERVER
  SPREAD_SERVER=$(echo "$name" | tr '[:upper:]' '[:lower:]')
  for n in ${SPREAD//,/ }; do
    [ "$n" -gt 0 ] || continue
    local started=$SECONDS
    [ "$n" -le "$made" ] || "$create" $((made + 1)) "$n"
    made=$((made > n ? made : n))
    echo "$name|spread over $n: $n databases made in $((SECONDS - started)) s||" >>"$WORK/results"
    for c in 1 64; do
      read -r one lat bad < <(SPREAD_N=1 SPREAD_DIST=uniform measure "$base" "$WORK/spread.lua" "$c")
      echo "$name|spread over $n: one of them, $c connection(s)|$one req/s|$lat µs|$bad" >>"$WORK/results"
      for dist in uniform zipf; do
        read -r rate lat bad < <(SPREAD_N=$n SPREAD_DIST=$dist measure "$base" "$WORK/spread.lua" "$c")
        echo "$name|spread over $n: $dist, $c connection(s)|$rate req/s ($((rate * 100 / (one > 0 ? one : 1))) % of one)|$lat µs|$bad" >>"$WORK/results"
      done
    done
    echo "$name|spread over $n: RSS, open files after|$(rss_mib "$pid") MiB, $(open_files "$pid") files||" >>"$WORK/results"
  done
}

# Runs wrk; prints "req/s mean-latency non-2xx".
measure() { # url script connections
  local out
  out=$(wrk -t1 -c"$3" -d"${DURATION}s" --latency ${2:+-s "$2"} "$1" 2>&1)
  python3 - "$out" <<'EOF'
import re, sys
out = sys.argv[1]
rate = re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)
lat = re.search(r"Latency\s+([\d.]+)(us|ms|s)", out)
scale = {"us": 1, "ms": 1000, "s": 1000000}[lat.group(2)]
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
print(f"{float(rate):.0f} {float(lat.group(1)) * scale:.0f} {bad.group(1) if bad else 0}")
EOF
}

# Creates CREATES databases one after the other with `curl`; prints "p50 p99" in ms.
# $1: a command that creates database number N (given as its argument) and prints
# curl's time_total.
CREATES="${CREATES:-100}"
create_latency() {
  local create=$1
  for n in $(seq 1 "$CREATES"); do "$create" "$n"; done | python3 -c '
import sys
t = sorted(float(x) * 1000 for x in sys.stdin.read().split())
print(f"{t[len(t) // 2]:.1f} {t[min(len(t) - 1, int(len(t) * 0.99))]:.1f}")'
}

# The process that serves: `atoll dev` is a supervisor that runs the server as its child
# (and starts it again if it dies); sqld serves itself.
server_of() { pgrep -P "$1" | head -n 1 | grep . || echo "$1"; }
# Resident memory of a server, MiB.
rss_mib() { echo $(( $(ps -o rss= -p "$(server_of "$1")") / 1024 )); }
# Its open files.
open_files() { ls "/proc/$(server_of "$1")/fd" | wc -l; }

# Runs every figure against one server: $1 name, $2 pipeline URL, $3 health URL, $4 token,
# $5 sqld namespace (x-namespace header).
run_figures() {
  local name=$1 url=$2 health=$3
  export TOKEN=$4 NAMESPACE=${5:-}
  for c in 1 16 64; do
    read -r rate lat bad < <(measure "$url" "$WORK/select.lua" "$c")
    echo "$name|point select, $c connection(s)|$rate req/s|$lat µs|$bad" >>"$WORK/results"
  done
  read -r rate lat bad < <(measure "$url" "$WORK/insert.lua" 64)
  echo "$name|single-row insert, 64 connections|$rate req/s|$lat µs|$bad" >>"$WORK/results"
  for c in 1 64; do
    read -r rate lat bad < <(measure "$health" "$WORK/health.lua" "$c")
    echo "$name|floor: GET /health, $c connection(s)|$rate req/s|$lat µs|$bad" >>"$WORK/results"
  done
}

# Atoll.
API_PORT=$(free_port)
DB_PORT=$(free_port)
"$ATOLL_BIN" dev --data-dir "$WORK/atoll" --listen "127.0.0.1:$API_PORT" \
  --db-listen "127.0.0.1:$DB_PORT" >"$WORK/atoll.log" 2>&1 &
PIDS+=($!)
wait_up "http://127.0.0.1:$API_PORT/health"
ADMIN=$(cat "$WORK/atoll/admin.token")
api() { curl -fsS -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' "$@"; }
api -X POST "http://127.0.0.1:$API_PORT/v1/organizations/admin/databases" \
  -d '{"name":"wrk","group":"default"}' >/dev/null
DB_TOKEN=$(api -X POST "http://127.0.0.1:$API_PORT/v1/organizations/admin/databases/wrk/auth/tokens" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["jwt"])')
ATOLL_URL="http://127.0.0.1:$DB_PORT/db/wrk-admin/v2/pipeline"
seed "$ATOLL_URL" -H "Authorization: Bearer $DB_TOKEN"
run_figures Atoll "$ATOLL_URL" "http://127.0.0.1:$DB_PORT/health" "$DB_TOKEN"
echo "Atoll|RSS after the select/insert run|$(rss_mib "${PIDS[0]}") MiB||" >>"$WORK/results"
sleep "$IDLE"
echo "Atoll|RSS ${IDLE} s later, idle|$(rss_mib "${PIDS[0]}") MiB||" >>"$WORK/results"
atoll_create() {
  api -o /dev/null -w '%{time_total}\n' -X POST \
    "http://127.0.0.1:$API_PORT/v1/organizations/admin/databases" -d "{\"name\":\"c$1\",\"group\":\"default\"}"
}
read -r p50 p99 < <(create_latency atoll_create)
echo "Atoll|create, sequential, p50 / p99|$p50 / $p99 ms||" >>"$WORK/results"
# s1 seeded through its pipeline, the others copies of it (a `database` seed), 4 at a time.
atoll_spread_create() { # from to
  local from=$1
  if [ "$from" -eq 1 ]; then
    api -X POST "http://127.0.0.1:$API_PORT/v1/organizations/admin/databases" \
      -d '{"name":"s1","group":"default"}' >/dev/null
    SEED=$SPREAD_SEED seed "http://127.0.0.1:$DB_PORT/db/s1-admin/v2/pipeline" -H "Authorization: Bearer $GROUP_TOKEN"
    from=2
  fi
  [ "$from" -le "$2" ] || return 0
  seq "$from" "$2" | xargs -P 4 -I{} curl -fsS -o /dev/null -H "Authorization: Bearer $ADMIN" \
    -H 'Content-Type: application/json' -X POST "http://127.0.0.1:$API_PORT/v1/organizations/admin/databases" \
    -d '{"name":"s{}","group":"default","seed":{"type":"database","name":"s1"}}'
}
GROUP_TOKEN=$(api -X POST "http://127.0.0.1:$API_PORT/v1/organizations/admin/groups/default/auth/tokens" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["jwt"])')
run_spread Atoll "http://127.0.0.1:$DB_PORT" "${PIDS[0]}" "$GROUP_TOKEN" atoll_spread_create

# sqld, when given: multi-tenant (namespaces), the database under test one namespace.
if [ -n "${SQLD_BIN:-}" ]; then
  SQLD_PORT=$(free_port)
  SQLD_ADMIN=$(free_port)
  "$SQLD_BIN" --db-path "$WORK/sqld" --http-listen-addr "127.0.0.1:$SQLD_PORT" \
    --admin-listen-addr "127.0.0.1:$SQLD_ADMIN" --enable-namespaces >"$WORK/sqld.log" 2>&1 &
  SQLD_PID=$!
  PIDS+=("$SQLD_PID")
  wait_up "http://127.0.0.1:$SQLD_PORT/health"
  sqld_create() {
    curl -fsS -o /dev/null -w '%{time_total}\n' -X POST -H 'Content-Type: application/json' \
      "http://127.0.0.1:$SQLD_ADMIN/v1/namespaces/$1/create" -d '{}'
  }
  sqld_create wrk >/dev/null
  SQLD_URL="http://127.0.0.1:$SQLD_PORT/v2/pipeline"
  seed "$SQLD_URL" -H "x-namespace: wrk"
  run_figures sqld "$SQLD_URL" "http://127.0.0.1:$SQLD_PORT/health" "" wrk
  echo "sqld|RSS after the select/insert run|$(rss_mib "$SQLD_PID") MiB||" >>"$WORK/results"
  sleep "$IDLE"
  echo "sqld|RSS ${IDLE} s later, idle|$(rss_mib "$SQLD_PID") MiB||" >>"$WORK/results"
  sqld_numbered_create() { sqld_create "c$1"; }
  read -r p50 p99 < <(create_latency sqld_numbered_create)
  echo "sqld|create, sequential, p50 / p99|$p50 / $p99 ms||" >>"$WORK/results"
  # Each namespace created and seeded through its pipeline, 4 at a time. sqld answers 404
  # for a namespace it is evicting from its cache while another is created (sqld 0.24.33:
  # "namespace `s1997` deallocated", then NamespaceDoesntExist), and serves it again a
  # moment later: the seed (which may run again) is retried.
  sqld_spread_one() {
    sqld_create "s$1" >/dev/null
    for _ in 1 2 3 4 5; do
      SEED=$SPREAD_SEED seed "$SQLD_URL" -H "x-namespace: s$1" 2>/dev/null && return 0
      sleep 0.2
    done
    SEED=$SPREAD_SEED seed "$SQLD_URL" -H "x-namespace: s$1"
  }
  sqld_spread_create() { # from to
    export -f sqld_spread_one sqld_create seed
    export SQLD_ADMIN SQLD_URL SPREAD_SEED
    seq "$1" "$2" | xargs -P 4 -I{} bash -c 'sqld_spread_one {}'
  }
  run_spread sqld "http://127.0.0.1:$SQLD_PORT" "$SQLD_PID" "" sqld_spread_create
else
  echo "SQLD_BIN not set: Atoll alone" >&2
fi

echo "| server | figure | throughput | mean latency | non-2xx |"
echo "|---|---|---|---|---|"
while IFS='|' read -r server figure rate latency bad; do
  echo "| $server | $figure | $rate | $latency | $bad |"
done <"$WORK/results"
