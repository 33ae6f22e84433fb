#!/usr/bin/env bash
# Command T of docs/PERFORMANCE.md (issue 23 item 5): trivial actions (`/bin/true`, no outputs) at
# 8 in flight against `gantry serve` with its default embedded worker, the load from `gantry bench`
# in another process, and the machine's spawn rate (Go starting `/bin/true` 4 at a time, measured
# by the same bench run) to compare with. Each variant is a server binary and a config (the load
# always comes from the first variant's binary); per round every variant runs once on a fresh data
# directory, the order reversed every other round. Per run: actions/s, p50, the spawn rate and the
# ratio, the server's CPU per action (utime+stime from /proc around the measured run; the actions'
# own CPU is the children's, printed apart), the state store's commits per action, and the load
# client's whole CPU in seconds (its spawn loops included: SPAWN=0 for the client alone). Then
# medians per variant and the median of each pair's per-round CPU ratios.
#
# Usage: scripts/bench-trivial.sh ROUNDS NAME=BINARY[:CONFIG]...
#   e.g. scripts/bench-trivial.sh 5 old=/tmp/gantry-old new=/tmp/gantry-new
# Environment: N (measured actions, default 2000), WARM (default 200), SPAWN (the bench's
# --spawn-rate duration, default 3s; 0 leaves it out). Keep the machine otherwise idle.
set -euo pipefail
# shellcheck source=lib/rounds.sh
source "$(dirname "$0")/lib/rounds.sh"

if [ $# -lt 2 ]; then
  echo "usage: $0 ROUNDS NAME=BINARY[:CONFIG]..." >&2
  exit 2
fi
rounds=$1
shift
variants=("$@")
first=${variants[0]#*=}
load=${first%%:*}
work=$(mktemp -d /tmp/bench-trivial.XXXXXX)
out="$work/results"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
tck=$(getconf CLK_TCK)
port=19981
n=${N:-2000}
spawn=()
if [ "${SPAWN:-3s}" != 0 ]; then spawn=(--spawn-rate "${SPAWN:-3s}"); fi

commits() { curl -fsS "http://127.0.0.1:$1/metrics" | awk '/^gantry_state_commits_total/ && /result="ok"/ {print $2}'; }

run() { # round name binary config
  local r=$1 name=$2 bin=$3 cfg=$4 data http=$((port + 1000))
  data=$(mktemp -d "$work/data.XXXX")
  local args=(serve --data-dir "$data" --listen 127.0.0.1:$port --http-listen 127.0.0.1:$http)
  if [ -n "$cfg" ]; then args+=(--config "$cfg"); fi
  "$bin" "${args[@]}" 2>"$data/serve.log" &
  server=$!
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$http/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  "$load" bench --server 127.0.0.1:$port --concurrency 8 --output-file=false --actions "${WARM:-200}" >/dev/null 2>&1
  local c0 c1 k0 k1 res
  c0=$(awk '{print $14 + $15, $16 + $17}' "/proc/$server/stat")
  k0=$(commits $http || echo 0)
  # bash's time keyword: the load client's own CPU (user and system seconds), spawn loops included
  res=$(TIMEFORMAT='LOADCPU %U %S'; { time "$load" bench --server 127.0.0.1:$port --concurrency 8 --output-file=false --actions "$n" "${spawn[@]}"; } 2>&1)
  c1=$(awk '{print $14 + $15, $16 + $17}' "/proc/$server/stat")
  k1=$(commits $http || echo 0)
  python3 - "$r" "$name" "$c0" "$c1" "$k0" "$k1" "$tck" "$n" "$(cut -d' ' -f1 /proc/loadavg)" <<PY | tee -a "$out"
import re, sys
r, name, c0, c1, k0, k1, tck, n, load = sys.argv[1:]
res = """$res"""
m = re.search(r"rate=([0-9.]+).*p50_ms=([0-9.]+)", res)
s = re.search(r"SPAWN.*?mean=([0-9.]+)", res)
lc = re.search(r"LOADCPU ([0-9.]+) ([0-9.]+)", res)
a, b = [float(x) for x in c0.split()], [float(x) for x in c1.split()]
n, tck = int(n), int(tck)
rate = float(m.group(1)) if m else 0
spawn = float(s.group(1)) if s else 0
print(f"{r} {name} rate={rate:.0f} p50={m.group(2) if m else 0} spawn={spawn:.0f} ratio={rate / spawn if spawn else 0:.3f} "
      f"cpu_ms={(b[0] - a[0]) * 1000 / tck / n:.3f} children_ms={(b[1] - a[1]) * 1000 / tck / n:.3f} "
      f"commits={(float(k1 or 0) - float(k0 or 0)) / n:.2f} "
      f"client_s={float(lc.group(1)) + float(lc.group(2)) if lc else 0:.2f} load={load}")
PY
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=""
  rm -rf "$data"
  port=$((port + 2))
}

run_rounds "$rounds" run "${variants[@]}"

PYTHONPATH="$(dirname "$0")/lib" python3 - "$out" <<'PY'
import statistics as st, sys
from rounds import load, print_pair_ratios
d = load(sys.argv[1])
for name, runs in d.items():
    med = lambda k: st.median(float(v[k]) for v in runs.values())
    print(f"{name}: server CPU median {med('cpu_ms'):.3f} ms an action, rate {med('rate'):.0f}/s, "
          f"spawn ratio {med('ratio'):.3f}, commits {med('commits'):.2f} an action")
print_pair_ratios(d, 'cpu_ms', 'server CPU')
PY
