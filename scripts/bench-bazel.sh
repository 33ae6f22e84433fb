#!/usr/bin/env bash
# Times a clean Bazel build of testdata/bazel/scale (a few hundred C actions) run locally
# against the same build run remotely on a fresh all-in-one Gantry (scheduler + embedded
# worker, slots = cores), and prints the ratio remote/local of the median wall times.
#
# Usage: scripts/bench-bazel.sh [bazel4|bazel2] [runs]      (defaults: bazel4, 3)
#
# Each run does, in turn (the order rotates from run to run, so machine noise hits every
# variant alike):
#   local:            bazel clean; time bazel build //... --jobs=LOCAL_JOBS
#                     (default spawn strategy, i.e. the Linux sandbox)
#   remote-J[-MODE]:  start a FRESH gantry serve (new data dir: no cache hits); bazel clean;
#                     time bazel build //... --remote_executor=grpc://... --spawn_strategy=remote
#                     --genrule_strategy=remote --jobs=J [--remote_download_minimal];
#                     check that every action ran remotely; stop the server.
#   cluster-s3-J[-MODE]: (GANTRY_BENCH_CLUSTER=1) start a FRESH cluster (scripts/bench-cluster.sh):
#                     MinIO and PostgreSQL, 2 frontends with storage in the bucket behind
#                     HAProxy, a scheduler, a standalone worker with as many slots as the
#                     embedded one; then as remote-J[-MODE], through HAProxy; stop it all.
# One Bazel server serves all runs (a fresh output root would time JVM start and
# extraction, not the build); an untimed build starts it, and a first round of every
# variant (run 0) warms it up and is not counted. Only `bazel build` is timed, not the clean.
#
# Besides wall time, each build's CPU is accounted (CPU-seconds, over the build alone):
# "bazel" (the Bazel server JVM), "actions" (the processes Bazel or Gantry ran), "gantry"
# (server + embedded worker themselves; in a cluster the frontends, the scheduler and the
# worker), "infra" (a cluster's MinIO, PostgreSQL and HAProxy) and "others" (the rest of the
# machine meanwhile: load from outside the benchmark, which on a shared machine is the main
# source of noise). "own" = bazel + actions + gantry + infra; on an otherwise idle machine a
# build of this shape is CPU-bound, so own/cores approximates its wall time.
#
# Environment:
#   GANTRY_BENCH_REMOTE_JOBS   --jobs values for remote builds, space separated (default "8":
#                              with 2 worker slots, --jobs=2 leaves the worker idle while
#                              Bazel checks the cache, uploads and downloads; 4 to 8 hide that,
#                              16 gains nothing)
#   GANTRY_BENCH_LOCAL_JOBS    --jobs for local builds (default: nproc)
#   GANTRY_BENCH_MODES         download modes for remote builds: "all", "minimal" or both
#                              (default "all minimal")
#   GANTRY_BENCH_CLUSTER=1     also time the cluster-s3 variants (needs minio, PostgreSQL's
#                              server binaries and haproxy; see scripts/bench-cluster.sh). Each
#                              cluster build's S3 requests (count, mean latency by operation,
#                              from the frontends' gantry_s3_request_duration_seconds) and the
#                              CPU of each of its processes are printed, with medians at the end
#   GANTRY_BENCH_STANDALONE=1  also time local builds without the sandbox (variant
#                              local-standalone: --spawn_strategy=local --genrule_strategy=local)
#   GANTRY_BENCH_CACHED=1      time fully cached rebuilds instead (issue 23 item 8): see
#                              "Cached mode" below
#   GANTRY_BENCH_CACHED_JOBS   --jobs for every cached-mode build (default 8)
#   GANTRY_BENCH_CACHED_VARIANTS  cached-mode variants (default "disk remote-cache remote-exec")
#   GANTRY_BENCH_CACHED_REPEAT times each variant is timed per round (default 1; the filling
#                              build is the slow part of a round): the order of every other
#                              pass is reversed
#   GANTRY_BENCH_CACHED_FILL   "combined" (default: one local build fills both caches) or
#                              "separate" (a local build fills the disk cache, a remote-execution
#                              build on Gantry's worker fills Gantry, as a remote-execution user's
#                              cache is filled)
#   GANTRY_BENCH_PROFILE=1     also write --profile and --execution_log_json_file for every
#                              build, and keep the gantry logs (implies GANTRY_BENCH_KEEP=1)
#   GANTRY_BENCH_KEEP=1        keep the temporary directory (logs, profiles) at exit
#   GANTRY_BENCH_BIN           use this gantry binary instead of building ./cmd/gantry
#   GANTRY_BAZEL4, GANTRY_BAZEL2  client binaries (as in check-bazel-workspace.sh)
#
# Cached mode (GANTRY_BENCH_CACHED=1): each round starts a FRESH gantry serve and a fresh
# --disk_cache directory and fills both with one untimed local build (bazel clean; bazel build
# --disk_cache=DIR --remote_cache=grpc://...: Bazel runs every action and uploads its result to
# both caches; GANTRY_BENCH_CACHED_FILL=separate: two builds, see below), then times, in an
# order that rotates from round to round, a clean rebuild (bazel clean; bazel build) that must
# be all cache hits:
#   disk:          --disk_cache=DIR                 (Bazel's own local cache: the baseline)
#   remote-cache:  --remote_cache=grpc://...        (Gantry as a cache only)
#   remote-exec:   --remote_executor=grpc://... --spawn_strategy=remote --genrule_strategy=remote
#                  (as remote-execution users have it: a hit is the same GetActionResult)
#   remote-cache-minimal: remote-cache with --remote_download_minimal (only if asked for in
#                  GANTRY_BENCH_CACHED_VARIANTS): no outputs are downloaded, so the difference
#                  to remote-cache is what the downloads (one ByteStream Read per file) cost
# and prints each variant's median wall time against disk's. Every build's log must report
# every action as a "disk cache hit" or "remote cache hit" (besides Bazel's internal ones).
# With GANTRY_BENCH_PROFILE=1 a CPU profile of gantry serve over each remote build is also
# written (logs/NAME.gantry.pprof, from /debug/pprof/profile), and each remote build's gRPC
# calls (count, mean ms by method, from /metrics) are printed.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
client="${1:-bazel4}"
runs="${2:-3}"
case "$client" in
  bazel4) bazel="${GANTRY_BAZEL4:-/usr/bin/bazel}"; extra=(--nosandbox_debug) ;;
  bazel2) bazel="${GANTRY_BAZEL2:-$REPO/.tools/npm/node_modules/@bazel/bazel-linux_x64/bazel-2.1.0-linux-x86_64}"; extra=() ;;
  *) echo "usage: $0 [bazel4|bazel2] [runs]" >&2; exit 2 ;;
esac
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "runs must be a positive integer" >&2; exit 2; }
[ -x "$bazel" ] || { echo "$client: $bazel missing; run scripts/install-test-deps.sh" >&2; exit 1; }
read -r -a remote_jobs <<<"${GANTRY_BENCH_REMOTE_JOBS:-8}"
read -r -a modes <<<"${GANTRY_BENCH_MODES:-all minimal}"
local_jobs="${GANTRY_BENCH_LOCAL_JOBS:-$(nproc)}"
profile="${GANTRY_BENCH_PROFILE:-0}"
keep="${GANTRY_BENCH_KEEP:-$profile}"
cluster="${GANTRY_BENCH_CLUSTER:-0}"
cached="${GANTRY_BENCH_CACHED:-0}"
cached_jobs="${GANTRY_BENCH_CACHED_JOBS:-8}"
cached_fill="${GANTRY_BENCH_CACHED_FILL:-combined}"
cached_repeat="${GANTRY_BENCH_CACHED_REPEAT:-1}"
[[ "$cached_repeat" =~ ^[1-9][0-9]*$ ]] || { echo "GANTRY_BENCH_CACHED_REPEAT must be a positive integer" >&2; exit 2; }
case "$cached_fill" in combined|separate) ;; *) echo "GANTRY_BENCH_CACHED_FILL: want combined or separate, not $cached_fill" >&2; exit 2 ;; esac
read -r -a cached_variants <<<"${GANTRY_BENCH_CACHED_VARIANTS:-disk remote-cache remote-exec}"
for v in "${cached_variants[@]}"; do
  case "$v" in disk|remote-cache|remote-exec|remote-cache-minimal) ;; *) echo "GANTRY_BENCH_CACHED_VARIANTS: unknown variant $v (want disk, remote-cache, remote-exec, remote-cache-minimal)" >&2; exit 2 ;; esac
done
# shellcheck source=bench-cluster.sh
. "$REPO/scripts/bench-cluster.sh"
if [ "$cluster" = 1 ]; then cluster_check || exit 1; fi
for m in "${modes[@]}"; do
  case "$m" in all|minimal) ;; *) echo "GANTRY_BENCH_MODES: unknown mode $m (want all, minimal)" >&2; exit 2 ;; esac
done

tmp="$(mktemp -d "${TMPDIR:-/tmp}/gantry-bench-bazel.XXXXXX")"
root="$tmp/output_user_root"
ws="$tmp/bazel/scale"
gantry_pid=""

stop_gantry() {
  if [ -n "$gantry_pid" ]; then
    kill "$gantry_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$gantry_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$gantry_pid" 2>/dev/null || true
    wait "$gantry_pid" 2>/dev/null || true
    gantry_pid=""
  fi
}
cleanup() {
  stop_gantry
  cluster_stop
  if [ -d "$ws" ]; then (cd "$ws" && "$bazel" --output_user_root="$root" shutdown >/dev/null 2>&1) || true; fi
  if [ "$keep" = 1 ]; then
    echo "kept $tmp" >&2
  else
    chmod -R u+w "$tmp" 2>/dev/null || true
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- set up ----------------------------------------------------------------------------
mkdir -p "$tmp/bazel" "$tmp/logs"
cp -r "$REPO/testdata/bazel/scale" "$REPO/testdata/bazel/stubs" "$tmp/bazel/"
if [ -n "${GANTRY_BENCH_BIN:-}" ]; then
  gantry="$GANTRY_BENCH_BIN"
else
  gantry="$tmp/gantry"
  echo "== building gantry" >&2
  (cd "$REPO" && go build -o "$gantry" ./cmd/gantry)
fi
cd "$ws"
bz() { "$bazel" --output_user_root="$root" "$@"; }
common=(//... "${extra[@]}" --incompatible_strict_action_env --color=no --curses=no)

echo "== $client: warm-up build (starts the Bazel server; not timed)" >&2
bz build "${common[@]}" --jobs="$local_jobs" >"$tmp/logs/warmup.log" 2>&1 ||
  { tail -30 "$tmp/logs/warmup.log" >&2; exit 1; }
server_pid=$(bz info server_pid 2>/dev/null)
hz=$(getconf CLK_TCK)

# processes_line LOG: the last "INFO: N processes: ..." line of a build log.
processes_line() { grep -E '^INFO: [0-9]+ processes' "$1" | tail -1; }

# cpu_of PID: "self children" CPU seconds of a process (children: the ones it waited for).
cpu_of() {
  sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null |
    awk -v hz="$hz" '{ printf "%.2f %.2f\n", ($12 + $13) / hz, ($14 + $15) / hz }' || echo "0 0"
}
# machine_busy: CPU seconds all CPUs have spent busy since boot.
machine_busy() { awk -v hz="$hz" '$1 == "cpu" { printf "%.2f\n", ($2 + $3 + $4 + $7 + $8 + $9) / hz }' /proc/stat; }

# The processes of the Gantry under test, "label class pid" (see tree_cpu): time_build writes
# their CPU before and after the build to LOG.cpu0 and LOG.cpu1.
cpu_roots=()

# time_build NAME LOG ARGS...: bazel clean, then a timed build. Prints "wall bazel_cpu
# bazel_children_cpu machine_busy_cpu", in seconds, the CPU figures over the build alone.
time_build() {
  local name="$1" log="$2"; shift 2
  local prof=()
  if [ "$profile" = 1 ]; then
    prof=(--profile="$tmp/logs/$name.profile" --execution_log_json_file="$tmp/logs/$name.execlog.json")
  fi
  bz clean >/dev/null 2>&1
  local t0 t1 c0 c1 m0 m1
  tree_cpu "${cpu_roots[@]}" >"$log.cpu0"
  read -r -a c0 < <(cpu_of "$server_pid")
  m0=$(machine_busy)
  t0=$(date +%s.%N)
  if ! bz build "${common[@]}" "$@" "${prof[@]}" >"$log" 2>&1; then
    tail -30 "$log" >&2
    echo "$name: build failed (log: $log)" >&2
    return 1
  fi
  t1=$(date +%s.%N)
  m1=$(machine_busy)
  read -r -a c1 < <(cpu_of "$server_pid")
  tree_cpu "${cpu_roots[@]}" >"$log.cpu1"
  awk -v a="$t0" -v b="$t1" -v s0="${c0[0]}" -v s1="${c1[0]}" -v k0="${c0[1]}" -v k1="${c1[1]}" \
    -v m0="$m0" -v m1="$m1" 'BEGIN { printf "%.2f %.2f %.2f %.2f\n", b - a, s1 - s0, k1 - k0, m1 - m0 }'
}

run_local() {
  local variant="$1" name="$2" log="$tmp/logs/$2.log"
  local flags=(--jobs="$local_jobs")
  [[ "$variant" == *local-standalone ]] && flags+=(--spawn_strategy=local --genrule_strategy=local)
  local m
  m=$(time_build "$name" "$log" "${flags[@]}")
  record "$variant" "$name" "$log" $m 0 0 0
}

# check_remote NAME LOG: fails unless every action of the build ran remotely: none locally,
# none from a cache.
check_remote() {
  local line
  line=$(processes_line "$2")
  if ! grep -Eq '[0-9]+ remote[.,]' <<<"$line" || grep -Eq 'cache hit|local|sandbox|worker' <<<"$line"; then
    echo "$1: not every action ran remotely: $line" >&2
    return 1
  fi
}

# gantry_cpu LOG: "gantry_self actions infra" over the build, from LOG.cpu0 and LOG.cpu1.
gantry_cpu() {
  cpu_delta "$1.cpu0" "$1.cpu1" | awk '
    $2 == "gantry" { g += $3; a += $4 }
    $2 == "infra" { i += $3 + $4 }
    END { printf "%.2f %.2f %.2f\n", g, a, i }'
}

# start_gantry NAME DATA: starts a gantry serve on data dir DATA (log: logs/NAME.gantry.log)
# and waits until it is healthy; sets gantry_pid, grpc_port and http_port.
grpc_port=""
http_port=""
start_gantry() {
  local name="$1" data="$2"
  grpc_port=$(free_port)
  http_port=$(free_port)
  "$gantry" serve --listen "127.0.0.1:$grpc_port" --http-listen "127.0.0.1:$http_port" \
    --data-dir "$data" >"$tmp/logs/$name.gantry.log" 2>&1 &
  gantry_pid=$!
  local up=0
  for _ in $(seq 100); do
    if curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null 2>&1; then up=1; break; fi
    kill -0 "$gantry_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$up" != 1 ]; then
    cat "$tmp/logs/$name.gantry.log" >&2
    echo "$name: gantry did not come up" >&2
    return 1
  fi
}

run_remote() {
  local variant="$1" name="$2" jobs="$3" mode="$4"
  local log="$tmp/logs/$name.log" data="$tmp/gantry-$name"
  start_gantry "$name" "$data"
  local flags=(--remote_executor="grpc://127.0.0.1:$grpc_port" --spawn_strategy=remote
    --genrule_strategy=remote --jobs="$jobs")
  [ "$mode" = minimal ] && flags+=(--remote_download_minimal)
  local m g
  cpu_roots=("gantry gantry $gantry_pid")
  m=$(time_build "$name" "$log" "${flags[@]}")
  curl -sf "http://127.0.0.1:$http_port/metrics" >"$tmp/logs/$name.metrics" 2>/dev/null || true
  g=$(gantry_cpu "$log")
  stop_gantry
  cpu_roots=()
  [ "$profile" = 1 ] || rm -rf "$data"
  check_remote "$name" "$log"
  record "$variant" "$name" "$log" $m $g
  stages "$variant" "$name" "$tmp/logs/$name.metrics"
}

# stages VARIANT NAME METRICS: prints and keeps the worker's mean stage times of a build.
stages() {
  local st
  st=$(stage_summary "$3")
  awk -v v="$1" -v n="$2" '{ printf "%s\t%s\tstage:%s\t%s\n", v, n, $1, $2 }' <<<"$st" >>"$details"
  echo "      worker stages (mean ms per action): $(awk '{ printf "%s %.1f  ", $1, $2 }' <<<"$st")"
}

# details: per remote build, "variant name stage:STAGE mean_ms"; per cluster build also
# "variant name label cpu" (a process's CPU, children included) and "variant name s3:OP
# requests mean_ms".
details="$tmp/details.tsv"
: >"$details"

run_cluster() {
  local variant="$1" name="$2" jobs="$3" mode="$4"
  local log="$tmp/logs/$name.log" dir="$tmp/cluster-$name"
  if ! cluster_start "$dir" "$tmp/logs/$name" "$(nproc)"; then
    for f in "$tmp/logs/$name".*.log; do echo "--- $f" >&2; tail -20 "$f" >&2; done
    echo "$name: the cluster did not come up" >&2
    return 1
  fi
  local flags=(--remote_executor="grpc://$cluster_addr" --spawn_strategy=remote
    --genrule_strategy=remote --jobs="$jobs")
  [ "$mode" = minimal ] && flags+=(--remote_download_minimal)
  local m g i
  cpu_roots=("${cluster_roots[@]}")
  m=$(time_build "$name" "$log" "${flags[@]}")
  for i in "${!cluster_fe_http[@]}"; do
    curl -sf "http://${cluster_fe_http[$i]}/metrics" >"$tmp/logs/$name.fe$((i + 1)).metrics" 2>/dev/null || true
  done
  curl -sf "http://$cluster_sched_http/metrics" >"$tmp/logs/$name.sched.metrics" 2>/dev/null || true
  g=$(gantry_cpu "$log")
  cluster_stop
  cpu_roots=()
  [ "$keep" = 1 ] || rm -rf "$dir"
  check_remote "$name" "$log"
  local by s3
  by=$(cpu_delta "$log.cpu0" "$log.cpu1" | awk '{ printf "%s %.1f  ", $1, $3 + $4 }')
  s3=$(s3_summary "$tmp/logs/$name".fe*.metrics)
  cpu_delta "$log.cpu0" "$log.cpu1" | awk -v v="$variant" -v n="$name" '{ printf "%s\t%s\t%s\t%.2f\n", v, n, $1, $3 + $4 }' >>"$details"
  awk -v v="$variant" -v n="$name" '{ printf "%s\t%s\ts3:%s\t%s\t%s\n", v, n, $1, $2, $3 }' <<<"$s3" >>"$details"
  record "$variant" "$name" "$log" $m $g
  echo "      cpu-s by process (worker: with its actions): $by"
  echo "      S3 requests (count, mean ms): $(awk '{ printf "%s %d %.1f  ", $1, $2, $3 }' <<<"$s3")"
  stages "$variant" "$name" "$tmp/logs/$name.sched.metrics"
}

results="$tmp/results.tsv"
: >"$results"
# record VARIANT NAME LOG WALL BAZEL_CPU BAZEL_CHILDREN_CPU MACHINE_CPU GANTRY_CPU
#   GANTRY_CHILDREN_CPU INFRA_CPU: prints and keeps one build's figures (seconds). "actions" is
#   the CPU of what Bazel (local) or Gantry (remote) ran; "gantry" is the server(s) and
#   worker themselves; "infra" a cluster's MinIO, PostgreSQL and HAProxy; "others" is what
#   the rest of the machine used meanwhile (outside load).
record() {
  local variant="$1" name="$2" log="$3" wall="$4" bself="$5" bkids="$6" busy="$7" gself="$8" gkids="$9" infra="${10}"
  local load line cpu
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  line=$(processes_line "$log")
  cpu=$(awk -v bs="$bself" -v bk="$bkids" -v m="$busy" -v gs="$gself" -v gk="$gkids" -v inf="$infra" \
    'BEGIN { o = m - bs - bk - gs - gk - inf; if (o < 0) o = 0
             printf "%.1f\t%.1f\t%.1f\t%.1f\t%.1f", bs, bk + gk, gs, inf, o }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$variant" "$name" "$wall" "$cpu" "$load" "$line" >>"$results"
  awk -F'\t' -v n="$name" -v w="$wall" -v l="$load" -v p="$line" '{
      printf "  %-24s %6ss  cpu-s: bazel %4.1f  actions %4.1f  gantry %4.1f  infra %4.1f  others %4.1f  load %s\n      %s\n",
        n, w, $1, $2, $3, $4, $5, l, p }' <<<"$cpu"
}

# --- cached mode (GANTRY_BENCH_CACHED=1) ------------------------------------------------

# check_cached NAME LOG KIND: fails unless every action of the build was a KIND cache hit
# (a regexp: Bazel 4 reports --disk_cache hits as "remote cache hit", later ones as "disk cache
# hit"), Bazel's internal ones aside.
check_cached() {
  local line rest
  line=$(processes_line "$2")
  rest=$(sed -E -e 's/^INFO: [0-9]+ processes?: ?//' -e "s/[0-9]+ $3 cache hits?//" -e 's/[0-9]+ internal//' \
    -e 's/[ ,.]//g' <<<"$line")
  if ! grep -Eq "[0-9]+ $3 cache hit" <<<"$line" || [ -n "$rest" ]; then
    echo "$1: not every action was a $3 cache hit: $line" >&2
    return 1
  fi
}

# grpc_calls BEFORE AFTER: "method calls mean_ms" for the gRPC calls between two scrapes of
# gantry_grpc_request_duration_seconds.
grpc_calls() {
  awk '
    /^gantry_grpc_request_duration_seconds_(count|sum)\{/ {
      match($0, /method="[^"]*"/); m = substr($0, RSTART + 8, RLENGTH - 9); sub(/.*\//, "", m)
      k = ($0 ~ /_count\{/) ? "n" : "s"
      v[FILENAME == ARGV[1] ? "0" : "1", k, m] += $NF; seen[m] = 1 }
    END { for (m in seen) { n = v["1", "n", m] - v["0", "n", m]; s = v["1", "s", m] - v["0", "s", m]
            if (n > 0) printf "%s %d %.2f\n", m, n, 1000 * s / n } }' "$1" "$2" | sort
}

# run_cached VARIANT NAME DISK: one timed, fully cached rebuild against the running gantry
# (remote-*) or the disk cache DISK.
run_cached() {
  local variant="$1" name="$2" disk="$3" log="$tmp/logs/$2.log"
  local flags=(--jobs="$cached_jobs") kind=remote
  case "${variant#warmup:}" in
    disk) flags+=(--disk_cache="$disk"); kind="(disk|remote)" ;;
    remote-cache) flags+=(--remote_cache="grpc://127.0.0.1:$grpc_port") ;;
    remote-cache-minimal) flags+=(--remote_cache="grpc://127.0.0.1:$grpc_port" --remote_download_minimal) ;;
    remote-exec) flags+=(--remote_executor="grpc://127.0.0.1:$grpc_port" --spawn_strategy=remote --genrule_strategy=remote) ;;
  esac
  local m g prof_pid=""
  curl -sf "http://127.0.0.1:$http_port/metrics" >"$log.metrics0" 2>/dev/null || true
  if [ "$profile" = 1 ] && [ "$variant" != disk ] && [ "$variant" != warmup:disk ]; then
    curl -sf -o "$tmp/logs/$name.gantry.pprof" \
      "http://127.0.0.1:$http_port/debug/pprof/profile?seconds=${GANTRY_BENCH_PPROF_SECONDS:-6}" &
    prof_pid=$!
  fi
  m=$(time_build "$name" "$log" "${flags[@]}")
  if [ -n "$prof_pid" ]; then wait "$prof_pid" || true; fi
  curl -sf "http://127.0.0.1:$http_port/metrics" >"$log.metrics1" 2>/dev/null || true
  g=$(gantry_cpu "$log")
  check_cached "$name" "$log" "$kind"
  record "$variant" "$name" "$log" $m $g
  if [ "$kind" = remote ]; then # a remote-* variant
    local calls
    calls=$(grpc_calls "$log.metrics0" "$log.metrics1")
    awk -v v="$variant" -v n="$name" '{ printf "%s\t%s\tgrpc:%s\t%s\t%s\n", v, n, $1, $2, $3 }' <<<"$calls" >>"$details"
    echo "      gRPC calls (count, mean ms): $(awk '{ printf "%s %d %.2f  ", $1, $2, $3 }' <<<"$calls")"
  fi
}

# cached_round R: a fresh gantry and disk cache, filled by one local build, then one timed
# rebuild of every variant, in an order rotated by R.
cached_round() {
  local r="$1" disk="$tmp/disk-cache-$1" warm="$tmp/logs/fill-$1.log"
  start_gantry "cached-$r" "$tmp/gantry-cached-$r"
  cpu_roots=("gantry gantry $gantry_pid")
  local fills=("--jobs=$local_jobs --disk_cache=$disk --remote_cache=grpc://127.0.0.1:$grpc_port")
  if [ "$cached_fill" = separate ]; then
    fills=("--jobs=$local_jobs --disk_cache=$disk"
      "--jobs=$cached_jobs --remote_executor=grpc://127.0.0.1:$grpc_port --spawn_strategy=remote --genrule_strategy=remote")
  fi
  local f
  for f in "${fills[@]}"; do
    bz clean >/dev/null 2>&1
    # shellcheck disable=SC2086 # f is a list of flags
    if ! bz build "${common[@]}" $f >"$warm" 2>&1; then
      tail -30 "$warm" >&2
      echo "round $r: the build filling the caches failed (log: $warm)" >&2
      return 1
    fi
    echo "   filled the caches: $(processes_line "$warm")"
  done
  local n=${#cached_variants[@]} i j k v tag
  for ((k = 0; k < cached_repeat; k++)); do
    for ((j = 0; j < n; j++)); do
      # Every other pass runs the rotated order backwards (ABC CBA ...).
      i=$j
      [ $((k % 2)) = 1 ] && i=$((n - 1 - j))
      v="${cached_variants[$(((i + r) % n))]}"
      tag="$v"
      [ "$r" = 0 ] && tag="warmup:$v"
      run_cached "$tag" "$v-$r.$k" "$disk"
    done
  done
  stop_gantry
  cpu_roots=()
  if [ "$profile" != 1 ]; then
    chmod -R u+w "$disk" 2>/dev/null || true
    rm -rf "$disk" "$tmp/gantry-cached-$r"
  fi
}

if [ "$cached" = 1 ]; then
  echo "== $client: $runs round(s) of fully cached rebuilds: ${cached_variants[*]}"
  echo "   every build --jobs=$cached_jobs; per round a fresh gantry serve and --disk_cache, filled by $([ "$cached_fill" = combined ] && echo "one local build" || echo "a local and a remote-execution build")"
  echo "   uptime before: $(uptime | sed 's/^ *//')"
  for ((r = 0; r <= runs; r++)); do
    if [ "$r" = 0 ]; then echo "-- round 0 (warm-up, not counted)"; else echo "-- round $r"; fi
    cached_round "$r"
  done
  echo "   uptime after:  $(uptime | sed 's/^ *//')"
  cmedian() { sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
  ccol() { awk -F'\t' -v v="$1" -v c="$2" '$1 == v { print $c }' "$results"; }
  echo "== $client: medians over $runs round(s) x $cached_repeat; wall in s, CPU in CPU-s"
  base=$(ccol disk 3 | cmedian)
  for v in "${cached_variants[@]}"; do
    w=$(ccol "$v" 3 | cmedian)
    printf '  %-14s wall %6ss  /disk %5s  cpu: bazel %4s gantry %4s others %4s  (runs: %s; load: %s)\n' "$v" "$w" \
      "$(awk -v a="$w" -v b="$base" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
      "$(ccol "$v" 4 | cmedian)" "$(ccol "$v" 6 | cmedian)" "$(ccol "$v" 8 | cmedian)" \
      "$(ccol "$v" 3 | tr '\n' ' ' | sed 's/ $//')" "$(ccol "$v" 9 | cut -d' ' -f1 | tr '\n' ' ' | sed 's/ $//')"
    if [ "$v" != disk ]; then
      printf '  %-14s gRPC calls per build (medians: count, mean ms):' ""
      for mth in $(awk -F'\t' -v v="$v" '$1 == v && $3 ~ /^grpc:/ { print substr($3, 6) }' "$details" | sort -u); do
        printf ' %s %s %s' "$mth" \
          "$(awk -F'\t' -v v="$v" -v o="grpc:$mth" '$1 == v && $3 == o { print $4 }' "$details" | cmedian)" \
          "$(awk -F'\t' -v v="$v" -v o="grpc:$mth" '$1 == v && $3 == o { print $5 }' "$details" | cmedian)"
      done
      printf '\n'
    fi
  done
  exit 0
fi

variants=(local)
[ "${GANTRY_BENCH_STANDALONE:-0}" = 1 ] && variants+=(local-standalone)
for j in "${remote_jobs[@]}"; do
  for m in "${modes[@]}"; do
    if [ "$m" = all ]; then variants+=("remote-j$j"); else variants+=("remote-j$j-$m"); fi
    if [ "$cluster" = 1 ]; then
      if [ "$m" = all ]; then variants+=("cluster-s3-j$j"); else variants+=("cluster-s3-j$j-$m"); fi
    fi
  done
done

echo "== $client: $runs run(s) of: ${variants[*]}"
echo "   local: --jobs=$local_jobs; remote: fresh gantry serve, $(nproc) worker slots"
[ "$cluster" = 1 ] && echo "   cluster-s3: fresh MinIO + PostgreSQL, HAProxy -> 2 frontends (s3), 1 scheduler, 1 worker with $(nproc) slots"
echo "   uptime before: $(uptime | sed 's/^ *//')"
# Run 0 warms up (JIT) every path through the Bazel server and is not counted: the first
# remote builds of a server cost Bazel about twice the CPU of later ones.
for ((r = 0; r <= runs; r++)); do
  if [ "$r" = 0 ]; then echo "-- run 0 (warm-up, not counted)"; else echo "-- run $r"; fi
  n=${#variants[@]}
  for ((i = 0; i < n; i++)); do
    v="${variants[$(((i + r) % n))]}"
    tag="$v"
    [ "$r" = 0 ] && tag="warmup:$v"
    if [[ "$v" == local* ]]; then
      run_local "$tag" "$v-$r"
    else
      rest="${v#remote-j}"
      rest="${rest#cluster-s3-j}"
      jobs="${rest%%-*}"
      mode=all
      [[ "$rest" == *-minimal ]] && mode=minimal
      if [[ "$v" == cluster-* ]]; then
        run_cluster "$tag" "$v-$r" "$jobs" "$mode"
      else
        run_remote "$tag" "$v-$r" "$jobs" "$mode"
      fi
    fi
  done
done
echo "   uptime after:  $(uptime | sed 's/^ *//')"

median() { sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
# col VARIANT N: column N of VARIANT's rows (own CPU: the sum of columns 4 to 7).
col() {
  awk -F'\t' -v v="$1" -v c="$2" '$1 == v { if (c == "own") printf "%.1f\n", $4 + $5 + $6 + $7; else print $c }' "$results"
}
echo "== $client: medians over $runs run(s); wall in s, CPU in CPU-s (own = bazel + actions + gantry + infra)"
base_wall=$(col local 3 | median)
base_own=$(col local own | median)
sa_wall=$(col local-standalone 3 | median)
for v in "${variants[@]}"; do
  w=$(col "$v" 3 | median)
  own=$(col "$v" own | median)
  printf '  %-24s wall %6ss  remote/local %4s' "$v" "$w" "$(awk -v a="$w" -v b="$base_wall" 'BEGIN { printf "%.2f", a / b }')"
  if [ -n "$sa_wall" ]; then
    printf '  /local-standalone %4s' "$(awk -v a="$w" -v b="$sa_wall" 'BEGIN { printf "%.2f", a / b }')"
  fi
  if [[ "$v" == cluster-s3-* ]]; then
    single="remote-${v#cluster-s3-}"
    sw=$(col "$single" 3 | median)
    so=$(col "$single" own | median)
    printf '  /%s %4s' "$single" "$(awk -v a="$w" -v b="$sw" 'BEGIN { printf "%.2f", a / b }')"
  fi
  printf '   (runs: %s)\n' "$(col "$v" 3 | tr '\n' ' ' | sed 's/ $//')"
  printf '  %-24s own cpu %5s (/local %4s) = bazel %4s + actions %4s + gantry %4s + infra %4s; others %4s\n' "" \
    "$own" "$(awk -v a="$own" -v b="$base_own" 'BEGIN { printf "%.2f", a / b }')" \
    "$(col "$v" 4 | median)" "$(col "$v" 5 | median)" "$(col "$v" 6 | median)" "$(col "$v" 7 | median)" \
    "$(col "$v" 8 | median)"
  if [[ "$v" != local* ]]; then
    printf '  %-24s worker stages (medians of the mean ms per action):' ""
    for st in input_fetch execute output_upload worker; do
      printf ' %s %s' "$st" "$(awk -F'\t' -v v="$v" -v o="stage:$st" '$1 == v && $3 == o { print $4 }' "$details" | median)"
    done
    printf '\n'
  fi
  if [[ "$v" == cluster-s3-* ]]; then
    printf '  %-24s own cpu /%s %4s; cpu-s by process (medians; worker with its actions):' "" "$single" \
      "$(awk -v a="$own" -v b="$so" 'BEGIN { printf "%.2f", a / b }')"
    for p in minio postgres haproxy fe1 fe2 sched worker; do
      printf ' %s %s' "$p" "$(awk -F'\t' -v v="$v" -v p="$p" '$1 == v && $3 == p { print $4 }' "$details" | median)"
    done
    printf '\n  %-24s S3 requests per build (medians: count, mean ms):' ""
    for op in $(awk -F'\t' -v v="$v" '$1 == v && $3 ~ /^s3:/ { print substr($3, 4) }' "$details" | sort -u); do
      printf ' %s %s %s ms' "$op" \
        "$(awk -F'\t' -v v="$v" -v o="s3:$op" '$1 == v && $3 == o { print $4 }' "$details" | median)" \
        "$(awk -F'\t' -v v="$v" -v o="s3:$op" '$1 == v && $3 == o { print $5 }' "$details" | median)"
    done
    printf '\n'
  fi
done
