#!/usr/bin/env bash
# Times the client commands on a generated C project (internal/testutil/cproject, 301
# sources) against a local build, all in separate processes on this machine:
#
#   local       make -s -j2 (gcc here)
#   batch-cold  gantry batch compile_commands.json on a FRESH gantry serve (new data dir:
#               no cached result, empty CAS) with an empty client cache (GANTRY_CACHE_DIR:
#               every compile runs the compiler's dependency listing)
#   batch-warm  the same again after removing the objects: every job a cache hit
#   make-cold   make -s -j2 CC="gantry cc gcc" on a fresh server and client cache
#   make-warm   the same again after make clean
#
# The order of local and the two cold variants rotates from run to run so machine noise
# hits all alike. For each variant: wall time (median over the runs), and for the batch
# the client's own CPU per job (`gantry batch --json`'s cpu_seconds / total) and the
# server's CPU (gantry serve with its embedded worker, the compiles included).
#
# Usage: scripts/bench-client.sh [runs]   (default 3)
# Environment: GANTRY_BENCH_JOBS (gantry batch --jobs, default 8),
#              GANTRY_BENCH_KEEP=1 (keep the temporary directory),
#              GANTRY_BENCH_DIR (where the temporary directory goes, default /tmp: the
#              project, the server's data and the client cache all live there).
#
# Mind the filesystem: on ext4 without a journal (the root disk of the project's CI
# machines) every file creation skips, one by one, the free inodes deleted in the last
# 1-6 minutes, so creating a file after a few thousand deletions costs 20-25x its usual
# CPU, for the client and a local compile alike (scripts/fs-create-cost.py measures it;
# docs/PERFORMANCE-HISTORY.md, "the client's CPU and the filesystem"). This script
# therefore moves the server's data and the client cache of a finished pair aside
# (removed at the end) instead of deleting them; the objects of each build are still
# deleted, as make clean does. Point GANTRY_BENCH_DIR at a journaled ext4 (a
# loop-mounted file will do) or a tmpfs for figures a usual machine would give.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${1:-3}
JOBS=${GANTRY_BENCH_JOBS:-8}
TMP=$(mktemp -d "${GANTRY_BENCH_DIR:-/tmp}/gantry-bench-client-XXXXXX")
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  [ "${GANTRY_BENCH_KEEP:-}" = 1 ] || rm -rf "$TMP"
}
trap cleanup EXIT

log() { echo "bench-client: $*" >&2; }
now() { date +%s.%N; }
ticks() { awk '{print $14+$15+$16+$17}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# warn_nojournal DIR: says so when DIR is on ext4 without a journal (no jbd2 entry).
warn_nojournal() {
  local dev fstype
  read -r dev fstype < <(df --output=source,fstype "$1" | tail -1)
  [ "$fstype" = ext4 ] || return 0
  dev=$(basename "$dev")
  if ! compgen -G "/proc/fs/jbd2/$dev-*" >/dev/null; then
    log "note: $1 is on ext4 without a journal ($dev): file creations there get dearer run after run, and the client's CPU a job with them; see the header of this script"
  fi
}

cd "$REPO"
warn_nojournal "$TMP"
go build -o "$TMP/gantry" ./cmd/gantry
go run ./internal/testutil/cproject/gen "$TMP/proj" >/dev/null
GANTRY="$TMP/gantry"
PROJ="$TMP/proj"
GRPC=127.0.0.1:$((20000 + RANDOM % 20000))
HTTP=127.0.0.1:$((40000 + RANDOM % 20000))

# set_aside PATH: moves PATH out of the way, to be removed with $TMP at the end (a
# deletion now would make the next run's file creations dearer: see the header).
set_aside() {
  [ -e "$1" ] || return 0
  mkdir -p "$TMP/set-aside"
  mv "$1" "$(mktemp -d "$TMP/set-aside/XXXXXX")/"
}

start_server() {
  stop_server
  set_aside "$TMP/data"
  "$GANTRY" serve --listen "$GRPC" --http-listen "$HTTP" --data-dir "$TMP/data" >"$TMP/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    curl -fsS "http://$HTTP/healthz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  log "gantry serve did not become healthy; see $TMP/server.log"
  exit 1
}
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}

# results: variant wall client_cpu_per_job_ms server_cpu_s
RESULTS="$TMP/results"
: >"$RESULTS"

run_local() {
  (cd "$PROJ" && make -s clean >/dev/null && sync)
  local t0 t1
  t0=$(now)
  (cd "$PROJ" && make -s -j2 >/dev/null)
  t1=$(now)
  echo "local $(echo "$t1 - $t0" | bc) - -" >>"$RESULTS"
}

# run_batch VARIANT: one gantry batch over the project, objects removed first.
run_batch() {
  local variant=$1 t0 t1 s0 s1
  rm -rf "$PROJ/build" "$PROJ/app"
  s0=$(ticks "$SERVER_PID")
  t0=$(now)
  (cd "$PROJ" && GANTRY_SERVER=$GRPC GANTRY_CACHE_DIR=$TMP/cc-cache "$GANTRY" batch --jobs "$JOBS" --json compile_commands.json >"$TMP/summary.json" 2>"$TMP/batch.log") || {
    log "gantry batch failed; see $TMP/batch.log"; exit 1; }
  t1=$(now)
  s1=$(ticks "$SERVER_PID")
  local cpu total
  cpu=$(grep -o '"cpu_seconds": [0-9.e-]*' "$TMP/summary.json" | awk '{print $2}')
  total=$(grep -o '"total": [0-9]*' "$TMP/summary.json" | awk '{print $2}')
  echo "$variant $(echo "$t1 - $t0" | bc) $(echo "1000 * $cpu / $total" | bc -l) $(echo "($s1 - $s0) / $hz" | bc -l)" >>"$RESULTS"
}

run_make_cc() {
  local variant=$1 t0 t1 s0 s1
  (cd "$PROJ" && make -s clean >/dev/null)
  s0=$(ticks "$SERVER_PID")
  t0=$(now)
  (cd "$PROJ" && GANTRY_SERVER=$GRPC GANTRY_CACHE_DIR=$TMP/cc-cache make -s -j2 CC="$GANTRY cc gcc" >/dev/null 2>"$TMP/make.log") || {
    log "make CC=gantry cc failed; see $TMP/make.log"; exit 1; }
  t1=$(now)
  s1=$(ticks "$SERVER_PID")
  echo "$variant $(echo "$t1 - $t0" | bc) - $(echo "($s1 - $s0) / $hz" | bc -l)" >>"$RESULTS"
}

batch_pair() {
  start_server; set_aside "$TMP/cc-cache"
  run_batch batch-cold
  run_batch batch-warm
}
make_pair() {
  start_server; set_aside "$TMP/cc-cache"
  run_make_cc make-cold
  run_make_cc make-warm
}

# An untimed round warms the page cache and the compiler.
run_local; batch_pair; make_pair
: >"$RESULTS"
for r in $(seq 1 "$RUNS"); do
  case $((r % 3)) in
    0) run_local; batch_pair; make_pair ;;
    1) batch_pair; make_pair; run_local ;;
    2) make_pair; run_local; batch_pair ;;
  esac
  log "run $r of $RUNS done"
done
stop_server

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
col() { awk -v v="$1" -v c="$2" '$1==v && $c!="-" {print $c}' "$RESULTS" | median; }
local_wall=$(col local 2)
num() { if [ "$1" = - ]; then echo -; else printf '%.2f' "$1"; fi; }
printf '%-11s %9s %9s %17s %12s   (%s runs, median; machine: %s cores)\n' variant wall_s vs_local client_ms_per_job server_cpu_s "$RUNS" "$(nproc)"
for v in local batch-cold batch-warm make-cold make-warm; do
  w=$(col "$v" 2)
  printf '%-11s %9.2f %9.2f %17s %12s\n' "$v" "$w" "$(echo "$w / $local_wall" | bc -l)" "$(num "$(col "$v" 3)")" "$(num "$(col "$v" 4)")"
done
echo "all runs (variant wall_s client_ms_per_job server_cpu_s):"
awk '{printf "%s", $1; for (i = 2; i <= NF; i++) printf " %s", ($i == "-" ? "-" : sprintf("%.2f", $i)); print ""}' "$RESULTS"
