#!/usr/bin/env bash
# Command H of docs/PERFORMANCE.md: the scheduler alone as an outside client sees it, in three
# processes: `gantry serve` (no embedded worker), 8 no-op workers of one slot each
# (`gantry bench --workers-only`) and the load (`gantry bench`). Each variant is a binary and a
# config; per round every variant runs once on a fresh data directory, the order reversed every
# other round. Per run: WARM actions at 64 in flight (the history fills), N measured at 64 in
# flight, and with C1=1 then 1,500 at one in flight. Printed per run: actions/s, p50 at 64, the
# server's CPU per action (utime+stime from /proc around the measured run), p50 at one in
# flight, and the CPU per action of the no-op workers' process and of the load client; then medians
# per variant and the median of each pair's per-round rate ratios. PORT: the first port (18981).
#
# Usage: scripts/bench-durable.sh ROUNDS NAME=BINARY:CONFIG...
#   e.g. printf 'worker:\n  enabled: false\n' > /tmp/durable.yaml
#        printf 'worker:\n  enabled: false\nscheduler:\n  store:\n    backend: memory\n' > /tmp/memory.yaml
#        C1=1 scripts/bench-durable.sh 5 durable=/tmp/gantry:/tmp/durable.yaml memory=/tmp/gantry:/tmp/memory.yaml
# Environment: C1=1 (also one in flight), DATAROOT (where the data directories go, default a
# temporary directory under /tmp; /dev/shm makes a sync free), WARM (default 11000), N (8000).
# Keep the machine otherwise idle: a build or test elsewhere moves every figure.
set -euo pipefail
# shellcheck source=lib/rounds.sh
source "$(dirname "$0")/lib/rounds.sh"

if [ $# -lt 2 ]; then
  echo "usage: $0 ROUNDS NAME=BINARY:CONFIG..." >&2
  exit 2
fi
rounds=$1
shift
variants=("$@")
root=${DATAROOT:-/tmp}
work=$(mktemp -d "$root/bench-durable.XXXXXX")
out="$work/results"
server="" workers=""
cleanup() {
  for p in $workers $server; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
tck=$(getconf CLK_TCK)
port=${PORT:-18981}
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # round name binary config
  local r=$1 name=$2 bin=$3 cfg=$4 data
  data=$(mktemp -d "$work/data.XXXX")
  "$bin" serve --config "$cfg" --data-dir "$data" --listen 127.0.0.1:$port --http-listen 127.0.0.1:$((port + 1000)) 2>"$data/serve.log" &
  server=$!
  for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  "$bin" bench --server 127.0.0.1:$port --workers-only --noop-workers 8 --noop-slots 1 --duration 600s >"$data/workers.log" 2>&1 &
  workers=$!
  "$bin" bench --server 127.0.0.1:$port --concurrency 64 --actions "${WARM:-11000}" --output-file=false >/dev/null 2>&1
  local c0 c1 w0 w1 res rate p50 cpa wpa cla c1p50=""
  c0=$(cpu "$server")
  w0=$(cpu "$workers")
  # The load client's own CPU (user+system seconds) from time(1).
  res=$(/usr/bin/time -f "client_cpu_s=%U+%S" "$bin" bench --server 127.0.0.1:$port --concurrency 64 --actions "${N:-8000}" --output-file=false 2>&1 | grep -E "RESULT|client_cpu_s")
  c1=$(cpu "$server")
  w1=$(cpu "$workers")
  rate=$(sed -n 's/.*rate=\([0-9.]*\).*/\1/p' <<<"$res")
  p50=$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' <<<"$res")
  cpa=$(awk -v a="$c0" -v b="$c1" -v t="$tck" -v n="${N:-8000}" 'BEGIN { printf "%.3f", (b - a) * 1000 / t / n }')
  wpa=$(awk -v a="$w0" -v b="$w1" -v t="$tck" -v n="${N:-8000}" 'BEGIN { printf "%.3f", (b - a) * 1000 / t / n }')
  cla=$(sed -n 's/.*client_cpu_s=\([0-9.]*\)+\([0-9.]*\).*/\1 \2/p' <<<"$res" | awk -v n="${N:-8000}" '{ printf "%.3f", ($1 + $2) * 1000 / n }')
  if [ "${C1:-0}" = 1 ]; then
    c1p50=$("$bin" bench --server 127.0.0.1:$port --concurrency 1 --actions 1500 --output-file=false 2>&1 | grep RESULT | sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p')
  fi
  echo "$r $name rate=$rate p50=$p50 cpu_ms=$cpa workers_ms=$wpa client_ms=$cla c1p50=$c1p50 load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out"
  kill "$workers" "$server" 2>/dev/null || true
  wait "$workers" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  workers="" server=""
  rm -rf "$data"
  port=$((port + 2))
}

run_rounds "$rounds" run "${variants[@]}"

PYTHONPATH="$(dirname "$0")/lib" python3 - "$out" <<'PY'
import statistics as st, sys
from rounds import load, print_pair_ratios
d = load(sys.argv[1])
for name, runs in d.items():
    rates = [float(v['rate']) for v in runs.values()]
    cpus = [float(v['cpu_ms']) for v in runs.values()]
    wcpus = [float(v['workers_ms']) for v in runs.values()]
    ccpus = [float(v['client_ms']) for v in runs.values() if v['client_ms']]
    c1 = [float(v['c1p50']) for v in runs.values() if v['c1p50']]
    print(f"{name}: rate median {st.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f}) actions/s, "
          f"server CPU {st.median(cpus):.3f} ms an action (workers {st.median(wcpus):.3f}"
          + (f", load client {st.median(ccpus):.3f}" if ccpus else "") + ")"
          + (f", one in flight p50 {st.median(c1):.2f} ms" if c1 else ""))
print_pair_ratios(d, 'rate', 'rate')
PY
