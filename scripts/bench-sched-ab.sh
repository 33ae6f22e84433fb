#!/usr/bin/env bash
# Compares the scheduler alone (PERFORMANCE.md command B: no embedded worker, 8 no-op workers
# inside the load generator, durable state) of two commits on the same machine load: builds
# the gantry binary of each, then per round starts a fresh `gantry serve` of each in turn
# (the order flips every round), warms it up with 2,000 actions and measures 10,000, and
# prints each side's rates and the server's CPU time per action (utime+stime from
# /proc/PID/stat around the measured run: steadier than rates on a busy machine), their
# medians, and the medians of the per-round ratios new/old.
#
# Usage: scripts/bench-sched-ab.sh OLD_COMMIT [NEW_COMMIT|WORKTREE] [ROUNDS]
#   defaults: NEW = the working tree, ROUNDS = 5
# Keep the machine otherwise idle: a build or test elsewhere moves every figure.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
old="${1:?usage: scripts/bench-sched-ab.sh OLD_COMMIT [NEW_COMMIT|WORKTREE] [ROUNDS]}"
new="${2:-WORKTREE}"
rounds="${3:-5}"
work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

build() { # commit-or-WORKTREE output
  if [ "$1" = WORKTREE ]; then
    (cd "$REPO" && go build -o "$2" ./cmd/gantry)
  else
    mkdir -p "$work/src-$1"
    git -C "$REPO" archive "$1" | tar -x -C "$work/src-$1"
    (cd "$work/src-$1" && go build -o "$2" ./cmd/gantry)
  fi
}
build "$old" "$work/old"
build "$new" "$work/new"
printf 'worker:\n  enabled: false\n' >"$work/durable.yaml"

port=18981
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # binary -> prints the measured rate and the server's CPU ms per action
  local data="$work/data-$port"
  "$work/$1" serve --config "$work/durable.yaml" --data-dir "$data" --listen "127.0.0.1:$port" --http-listen "" 2>"$work/$1.log" &
  server=$!
  for _ in $(seq 100); do
    "$work/$1" bench --server "127.0.0.1:$port" --concurrency 64 --actions 2000 --noop-workers 8 >/dev/null 2>&1 && break
    sleep 0.1
  done
  local before rate after
  before=$(cputicks "$server")
  rate=$("$work/$1" bench --server "127.0.0.1:$port" --concurrency 64 --actions 10000 --noop-workers 8 2>&1 |
    sed -n 's/.*rate=\([0-9.]*\).*/\1/p' | head -1)
  after=$(cputicks "$server")
  echo "$rate $(( (after - before) * 1000 / $(getconf CLK_TCK) ))"
  kill "$server"; wait "$server" 2>/dev/null || true; server=""
  rm -rf "$data"
  port=$((port + 1))
}

out="$work/results"
for r in $(seq "$rounds"); do
  order="old new"
  [ $((r % 2)) = 1 ] || order="new old"
  for b in $order; do
    echo "$r $b $(run "$b")" >>"$out"
  done
  echo "round $r of $rounds done ($(uptime | sed 's/.*load/load/'))" >&2
done

python3 - "$out" <<'PY'
import collections, statistics as st, sys
d = collections.defaultdict(dict)
cpu = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r, b, rate, ms = line.split()
    d[b][r] = float(rate)
    cpu[b][r] = float(ms) / 10000
for b in ("old", "new"):
    rs = sorted(d[b], key=int)
    print(f"{b}: rates " + " ".join(f"{d[b][r]:.0f}" for r in rs) + f"  median {st.median(d[b].values()):.0f} actions/s; "
          + "server CPU ms/action " + " ".join(f"{cpu[b][r]:.3f}" for r in rs) + f"  median {st.median(cpu[b].values()):.3f}")
rounds = [r for r in d["old"] if r in d["new"]]
ratios = [d["new"][r] / d["old"][r] for r in rounds]
cratios = [cpu["new"][r] / cpu["old"][r] for r in rounds]
print("new/old rate per round: " + " ".join(f"{x:.3f}" for x in ratios) + f"  median {st.median(ratios):.3f}")
print("new/old server CPU per action per round: " + " ".join(f"{x:.3f}" for x in cratios) + f"  median {st.median(cratios):.3f}")
PY
