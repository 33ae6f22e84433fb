#!/usr/bin/env bash
# Compares the storage benchmarks of two commits on the same machine load: builds the
# internal/frontend test binary of each, then runs them alternately (the order flips every
# round), one invocation per binary per round, and prints per-benchmark medians (MB/s,
# share of the same invocation's SHA-256, CPU-ms/op) and the medians of the per-round
# ratios new/old.
#
# Usage: scripts/bench-ab.sh OLD_COMMIT [NEW_COMMIT|WORKTREE] [ROUNDS] [BENCH_REGEXP]
#   defaults: NEW = the working tree, ROUNDS = 6,
#             BENCH_REGEXP = 'ByteStreamWrite256MiB|SHA256'
# Example: scripts/bench-ab.sh 6bb23c4 WORKTREE 8
# Keep the machine otherwise idle: a build or test elsewhere moves every figure.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
old="${1:?usage: scripts/bench-ab.sh OLD_COMMIT [NEW_COMMIT|WORKTREE] [ROUNDS] [BENCH_REGEXP]}"
new="${2:-WORKTREE}"
rounds="${3:-6}"
bench="${4:-ByteStreamWrite256MiB|SHA256}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

build() { # commit-or-WORKTREE output
  if [ "$1" = WORKTREE ]; then
    (cd "$REPO" && go test -c -o "$2" ./internal/frontend/)
  else
    mkdir -p "$work/src-$1"
    git -C "$REPO" archive "$1" | tar -x -C "$work/src-$1"
    (cd "$work/src-$1" && go test -c -o "$2" ./internal/frontend/)
  fi
}
build "$old" "$work/old.test"
build "$new" "$work/new.test"

out="$work/results"
for r in $(seq "$rounds"); do
  order="old new"
  [ $((r % 2)) = 1 ] || order="new old"
  for b in $order; do
    (cd "$REPO/internal/frontend" && "$work/$b.test" -test.run '^$' -test.bench "$bench" -test.benchtime=3x) |
      awk -v r="$r" -v b="$b" '/^Benchmark/ {cpu=""; mb=""; ns=""; for (i=1;i<=NF;i++) { if ($(i+1)=="cpu-ms/op") cpu=$i; if ($(i+1)=="MB/s") mb=$i; if ($(i+1)=="ns/op") ns=$i }
        # benchmarks without MB/s are compared in operations per second
        if (mb == "") mb = "ops:" 1e9 / ns; print r, b, $1, mb, cpu}' >>"$out"
  done
  echo "round $r of $rounds done ($(uptime | sed 's/.*load/load/'))" >&2
done

python3 - "$out" <<'PY'
import collections, statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
d = collections.defaultdict(lambda: collections.defaultdict(dict))  # bin -> bench -> round -> (mb, cpu)
unit = {}
for r in rows:
    rnd, b, name = r[0], r[1], r[2]
    unit[name] = "ops/s" if r[3].startswith("ops:") else "MB/s"
    mb = float(r[3].removeprefix("ops:"))
    cpu = float(r[4]) if len(r) > 4 else None
    d[b][name][rnd] = (mb, cpu)
sha = {b: next((v for k, v in d[b].items() if k.startswith("BenchmarkSHA256")), {}) for b in d}
names = sorted({n for b in d for n in d[b]})
for n in names:
    print(n)
    for b in ("old", "new"):
        v = d[b].get(n, {})
        if not v:
            continue
        mbs = [x[0] for x in v.values()]
        line = f"  {b}: {st.median(mbs):7.0f} {unit[n]} [{min(mbs):.0f}-{max(mbs):.0f}]"
        pct = [v[k][0] / sha[b][k][0] for k in v if k in sha[b]]
        if pct and unit[n] == "MB/s" and not n.startswith("BenchmarkSHA256"):
            line += f"  {100*st.median(pct):.0f}% of SHA-256 [{100*min(pct):.0f}-{100*max(pct):.0f}%]"
        cpus = [x[1] for x in v.values() if x[1] is not None]
        if cpus:
            line += f"  {st.median(cpus):.0f} cpu-ms/op"
        print(line)
    both = [k for k in d["old"].get(n, {}) if k in d["new"].get(n, {})]
    if both:
        tr = [d["new"][n][k][0] / d["old"][n][k][0] for k in both]
        line = f"  new/old per round: throughput {st.median(tr):.2f} [{min(tr):.2f}-{max(tr):.2f}]"
        cr = [d["new"][n][k][1] / d["old"][n][k][1] for k in both if d["old"][n][k][1]]
        if cr:
            line += f", cpu {st.median(cr):.2f} [{min(cr):.2f}-{max(cr):.2f}]"
        print(line)
PY
