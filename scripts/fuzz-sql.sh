#!/usr/bin/env bash
# A SQL fuzzing campaign against the engine, through the tenant sandbox (`atoll fuzz-sql`):
#
#   scripts/fuzz-sql.sh [DURATION_SECS]        # default 3600
#
# Runs `atoll fuzz-sql` again and again, each run with a new random seed, until
# DURATION_SECS are over. A run that dies of a signal (SIGSEGV, SIGABRT from glibc's heap
# checks, …) leaves the case it was running in its work directory's current-case.sql: it is
# copied to fuzz/sql-crashes/crash-<sha256 prefix>.sql with a header (seed, signal, date,
# the run's last words on stderr), and the campaign goes on. What is not a crash but a
# tenant could hold a node with goes to fuzz/sql-findings/ (not replayed by the tests): a
# statement that outlived its deadline by a minute (a hang: exit code 3, hang-*.sql), and
# each run's statement that overran its deadline most (slow-*.sql, over 3 s) and that raised
# the peak memory most (hungry-*.sql, by 256 MiB or more).
# `cargo test -p atoll --test sql_crash_corpus` replays fuzz/sql-crashes through a real
# node; fuzz/sql-crashes/README.md says what to do with a new file.
#
# ATOLL_BIN=<path> uses that binary instead of building one (`cargo build --release -p atoll`
# takes long on two cores; target/debug/atoll fuzzes at the same speed: the engine is built
# with opt-level 3 in debug builds too). ATOLL_FUZZ_RUN_SECONDS (default 300) is the length
# of one run: a new seed at least that often. ATOLL_FUZZ_STATEMENT_MEMORY=<bytes> gives each
# statement that budget of the engine's heap instead of the node's default (512 MiB): a few
# MiB make the engine's out-of-memory paths run all the time (a tenant reaches them at will
# by sizing its statement); a crash found so is replayed with the same `--statement-memory`.
#
# CI runs one short campaign with a fixed seed instead (scripts/test.sh); the random
# campaigns are run by hand with this script.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
DURATION="${1:-3600}"
RUN_SECONDS="${ATOLL_FUZZ_RUN_SECONDS:-300}"
CRASHES="$REPO_ROOT/fuzz/sql-crashes"
FINDINGS="$REPO_ROOT/fuzz/sql-findings"

if [[ -z "${ATOLL_BIN:-}" ]]; then
  echo "==> cargo build --release -p atoll (ATOLL_BIN=<path> to skip)"
  cargo build --release -p atoll --locked
  ATOLL_BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/atoll"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/atoll-fuzz-sql.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

runs=0
statements=0
crashes=0
new_crashes=0
hangs=0
findings=0
started=$SECONDS
end=$((SECONDS + DURATION))

# Keeps a case of a run: $1 the directory, $2 the file's prefix, $3 what happened, $4 the
# seed, $5 the case file (default: current-case.sql, the case a dead run was running).
keep_case() {
  local dir="$1" prefix="$2" what="$3" seed="$4"
  local case_file="${5:-$WORK/current-case.sql}"
  local sha file
  sha="$(sha256sum "$case_file" | cut -c1-16)"
  file="$dir/$prefix-$sha.sql"
  mkdir -p "$dir"
  if [[ -e "$file" ]]; then
    echo "    the same case as $file"
    return 1
  fi
  {
    echo "-- $what"
    echo "-- seed $seed: atoll fuzz-sql --seed $seed${ATOLL_FUZZ_STATEMENT_MEMORY:+ --statement-memory $ATOLL_FUZZ_STATEMENT_MEMORY} (cases of a seed are the same whatever runs before them)"
    echo "-- found $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/fuzz-sql.sh ($("$ATOLL_BIN" --version))"
    echo "-- the last statement below is the one that was running; the run's last words on stderr:"
    tail -n 5 "$WORK/stderr.txt" | sed 's/^/--   /'
    cat "$case_file"
  } >"$file"
  echo "    kept in $file"
}

while ((SECONDS < end)); do
  left=$((end - SECONDS))
  run_for=$((left < RUN_SECONDS ? left : RUN_SECONDS))
  ((run_for > 0)) || break
  seed="$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')"
  rm -f "$WORK/progress.txt"
  set +e
  "$ATOLL_BIN" fuzz-sql --seed "$seed" --duration "$run_for" --work-dir "$WORK" \
    ${ATOLL_FUZZ_STATEMENT_MEMORY:+--statement-memory "$ATOLL_FUZZ_STATEMENT_MEMORY"} \
    >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"
  code=$?
  set -e
  runs=$((runs + 1))
  # The run's statement count: its summary, or (it died) the last case it finished plus
  # the statements of the one it was running.
  ran="$(grep -o 'statements=[0-9]*' "$WORK/stdout.txt" | tail -n 1 | cut -d= -f2 || true)"
  if [[ -z "$ran" ]]; then
    done_before="$(cat "$WORK/progress.txt" 2>/dev/null || echo 0)"
    in_case="$(grep -vc '^--' "$WORK/current-case.sql" 2>/dev/null || echo 0)"
    ran=$((done_before + in_case))
  fi
  statements=$((statements + ran))
  if ((code == 0)); then
    echo "run $runs: $(grep "statements/s=" "$WORK/stdout.txt" | tail -n 1)"
    # Not crashes, but worth a look: kept in fuzz/sql-findings/.
    if line="$(grep "slowest statement" "$WORK/stdout.txt")" && [[ -f "$WORK/slowest-case.sql" ]]; then
      echo "    ${line:0:300}"
      keep_case "$FINDINGS" slow "slow: ${line:10:120}" "$seed" "$WORK/slowest-case.sql" &&
        findings=$((findings + 1)) || true
    fi
    if line="$(grep "hungriest statement" "$WORK/stdout.txt")" && [[ -f "$WORK/hungriest-case.sql" ]]; then
      echo "    ${line:0:300}"
      keep_case "$FINDINGS" hungry "memory: ${line:10:120}" "$seed" "$WORK/hungriest-case.sql" &&
        findings=$((findings + 1)) || true
    fi
  elif ((code > 128)); then
    signal=$((code - 128))
    name="SIG$(kill -l "$signal" 2>/dev/null || echo "$signal")"
    crashes=$((crashes + 1))
    echo "run $runs (seed $seed): CRASH: killed by $name (signal $signal) after $ran statements"
    if keep_case "$CRASHES" crash "crash: $name (signal $signal)" "$seed"; then
      new_crashes=$((new_crashes + 1))
    fi
  elif ((code == 3)); then
    hangs=$((hangs + 1))
    echo "run $runs (seed $seed): HANG after $ran statements"
    keep_case "$FINDINGS" hang "hang: a statement ran a minute past its deadline" "$seed" || true
  else
    echo "run $runs (seed $seed): atoll fuzz-sql failed (exit code $code):" >&2
    cat "$WORK/stderr.txt" >&2
    exit 1
  fi
done

elapsed=$((SECONDS - started))
echo "==> fuzz-sql campaign: ${elapsed} s, $runs runs, $statements statements ($((statements / (elapsed > 0 ? elapsed : 1))) per second), $crashes crashes ($new_crashes new, in fuzz/sql-crashes/), $hangs hangs, $findings slow or memory-hungry cases (fuzz/sql-findings/)"
