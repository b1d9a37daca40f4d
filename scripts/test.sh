#!/usr/bin/env bash
# The test suite: the README's test command, and what CI runs after its lint gates.
#
#   scripts/test.sh
#
# 1. every Rust test on the embedded SQLite backend, with an S3-compatible server on loopback
#    for the durable-storage tests (scripts/s3.sh; unit tests, the store's conformance
#    suite on SQLite *and* PostgreSQL, the HTTP tests and the authorization matrix, the
#    `atoll` binary's server commands);
# 2. the HTTP tests and the authorization matrix again on PostgreSQL
#    (ATOLL_TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test);
#    they skip loudly when no PostgreSQL answers;
# 3. the compatibility test: the official @tursodatabase/api SDK against `atoll dev`;
# 4. the web console in Debian's headless chromium (scripts/console.sh installs it);
# 5. the README: its ```sh blocks, in order, against a fresh `atoll dev` (scripts/readme.sh);
# 6. schemathesis against `/openapi.json` of `atoll dev` (bounded: scripts/schemathesis.sh);
# 7. the load test: a 60 s mixed workload, zero failures, flat memory (`atoll bench --load`);
# 8. the load test against the production topology with a replica and a node SIGKILLed
#    (`atoll bench --load --topology`, on PostgreSQL; skipped loudly without it).
#
# The fuzz corpus (fuzz/corpus) is replayed by step 1 (`tests/fuzz_corpus.rs` in
# atoll-data and atoll-types); the fuzzers themselves need nightly (fuzz/README.md).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"

# The storage tests run on S3 as well as on file:// (moto's server on loopback).
source scripts/s3.sh
set -euo pipefail
trap 'kill "$ATOLL_S3_PID" 2>/dev/null || true' EXIT

# The official Node clients, which the replicas test also runs (tests/compat/replica-client.mjs).
(cd tests/compat && npm ci --no-audit --no-fund --loglevel=error)

echo "==> Rust tests (SQLite backend)"
# atoll-compat-rust runs Atoll in process beside the official `libsql` client in remote
# mode; `atoll`'s embedded-replica test needs that client's `sync` feature, which links
# a second SQLite. Built in one invocation, features unify and the two SQLites collide,
# so the compatibility crate gets an invocation of its own.
cargo test --workspace --exclude atoll-compat-rust --locked
cargo test -p atoll-compat-rust --locked

echo "==> SQL fuzzer through the sandbox (60 s, fixed seed)"
# A fixed seed keeps CI reproducible: the same cases, in the same order, as many as fit in
# 60 s. Random campaigns (new seeds, crash capture into fuzz/sql-crashes/) are run by hand
# with scripts/fuzz-sql.sh (docs/SECURITY.md, "The SQL fuzzer").
"$TARGET_DIR/debug/atoll" fuzz-sql --seed 20260026 --duration 60

echo "==> HTTP tests and authorization matrix on PostgreSQL"
# `--workspace` keeps the same feature set as above, so nothing is rebuilt.
ATOLL_TEST_BACKEND=postgres cargo test --workspace --locked --test api

echo "==> SDK compatibility (@tursodatabase/api against atoll dev)"
# The binary the tests above built (`cargo build` alone would resolve features without
# dev-dependencies and rebuild much of the tree).
ATOLL_BIN="$TARGET_DIR/debug/atoll" scripts/compat.sh

echo "==> Web console in a headless browser (chromium + playwright-core against atoll dev)"
ATOLL_BIN="$TARGET_DIR/debug/atoll" scripts/console.sh

echo "==> README blocks, top to bottom, against a fresh atoll dev"
ATOLL_BIN="$TARGET_DIR/debug/atoll" scripts/readme.sh

echo "==> Schemathesis (the platform API against its OpenAPI document)"
ATOLL_BIN="$TARGET_DIR/debug/atoll" scripts/schemathesis.sh

echo "==> Load test (mixed workload, zero failed requests, flat memory)"
"$TARGET_DIR/debug/atoll" bench --load --duration "${ATOLL_LOAD_SECONDS:-60}"

echo "==> Load test against the production topology (2 replicas, 3 nodes, SIGKILLs; PostgreSQL)"
# An empty database of its own on the test PostgreSQL; skipped, loudly, without one.
PG_BASE="${ATOLL_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
if psql "$PG_BASE" -qc "DROP DATABASE IF EXISTS atoll_topology_load" -c "CREATE DATABASE atoll_topology_load" >/dev/null 2>&1; then
  "$TARGET_DIR/debug/atoll" bench --load --topology "${PG_BASE%/*}/atoll_topology_load" \
    --duration "${ATOLL_TOPOLOGY_LOAD_SECONDS:-30}"
else
  echo "WARNING: no PostgreSQL at $PG_BASE: the topology load test is SKIPPED" >&2
fi
