#!/usr/bin/env bash
# Times a changed large file through `gantry run`, whole against chunked, in separate
# processes on this machine: a `gantry serve` of its own for each pair, the client in
# another process.
#
# A pair of runs of `gantry run --input f.bin --output out.bin -- cp f.bin out.bin`:
#   run 1  f.bin is 256 MiB of random bytes (v1): uploaded, and out.bin downloaded
#   run 2  f.bin with 1 MiB in the middle overwritten (v2): the figures are this run's
#          bytes up (the input) and down (the output) from -v, its upload and download
#          step times from -v, and its wall time
# whole:   GANTRY_CHUNK_THRESHOLD=off, worker.chunk_threshold 0
# chunked: the defaults (16 MiB): run 2 sends the chunks of v2 the CAS lacks and fetches
#          those of out.bin the client's chunk cache (filled by run 1) lacks; the worker
#          takes the input's chunks from its own chunk directory the same way.
# The order of the two variants alternates from pair to pair.
#
# Usage: scripts/bench-chunking.sh [pairs]   (default 3)
# Environment: GANTRY_BENCH_DIR (where the temporary directory goes, default /tmp).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PAIRS=${1:-3}
TMP=$(mktemp -d "${GANTRY_BENCH_DIR:-/tmp}/gantry-bench-chunking-XXXXXX")
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
log() { echo "bench-chunking: $*" >&2; }

go build -o "$TMP/gantry" "$REPO/cmd/gantry"
G=$TMP/gantry
head -c $((256 << 20)) /dev/urandom > "$TMP/v1.bin"
cp "$TMP/v1.bin" "$TMP/v2.bin"
head -c $((1 << 20)) /dev/urandom | dd of="$TMP/v2.bin" bs=1M seek=128 conv=notrunc status=none
printf 'worker:\n  chunk_threshold: 0\n' > "$TMP/whole.yaml"
printf 'worker:\n  chunk_threshold: 16MiB\n' > "$TMP/chunked.yaml"

# pair MODE N: one pair of runs on a fresh server; prints MODE and run 2's figures.
pair() {
  local mode=$1 n=$2 port=$((20000 + RANDOM % 20000)) dir=$TMP/$1-$2
  mkdir -p "$dir/work" "$dir/cache"
  "$G" serve --config "$TMP/$mode.yaml" --data-dir "$dir/data" --listen "127.0.0.1:$port" --http-listen "" 2>"$dir/serve.log" &
  SERVER_PID=$!
  for _ in $(seq 100); do "$G" run --server "127.0.0.1:$port" -- true 2>/dev/null && break; sleep 0.1; done
  local env=(GANTRY_SERVER="127.0.0.1:$port" GANTRY_CACHE_DIR="$dir/cache")
  [ "$mode" = whole ] && env+=(GANTRY_CHUNK_THRESHOLD=off)
  cp "$TMP/v1.bin" "$dir/work/f.bin"
  (cd "$dir/work" && env "${env[@]}" "$G" run -v --input f.bin --output out.bin -- cp f.bin out.bin 2>"$dir/run1.log")
  cp "$TMP/v2.bin" "$dir/work/f.bin"
  sync
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$dir/work" && env "${env[@]}" "$G" run -v --input f.bin --output out.bin -- cp f.bin out.bin 2>"$dir/run2.log")
  t1=$(date +%s.%N)
  cmp -s "$dir/work/out.bin" "$TMP/v2.bin" || { log "$mode: out.bin is not v2"; exit 1; }
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=
  printf '%s wall %.3fs: %s\n' "$mode" "$(echo "$t1 - $t0" | bc)" "$(sed 's/^gantry run: //' "$dir/run2.log")"
  mv "$dir" "$TMP/done-$mode-$n"
}

log "$(lscpu | grep 'Model name' | sed 's/  */ /g'), $(nproc) CPUs; $PAIRS pairs"
for i in $(seq "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then pair whole "$i"; pair chunked "$i"; else pair chunked "$i"; pair whole "$i"; fi
done
