# Sourced by scripts/bench-bazel.sh: starts and stops a whole Gantry cluster on this machine,
# as docs/OPERATIONS.md ("Several nodes") lays it out, for one timed build:
#
#   MinIO (the bucket) + PostgreSQL (the state store, fsync on, as the embedded store's)
#   2 x gantry serve --role frontend   storage.cas/action_cache on s3, worker.enabled: false
#   HAProxy, mode tcp, in front of both frontends (roundrobin, with checks)
#   1 x gantry serve --role scheduler  cluster.cas: HAProxy
#   1 x gantry worker --scheduler HAProxy, --cores SLOTS
#
# Everything listens on 127.0.0.1, lives in a fresh directory and is stopped by cluster_stop.
# Uses from the sourcing script: $REPO, $gantry, free_port.
#
# After cluster_start DIR LOGPREFIX SLOTS:
#   cluster_addr       the balancer's host:port (Bazel and the worker use it)
#   cluster_fe_http    the frontends' HTTP addresses (/metrics with gantry_s3_*)
#   cluster_sched_http the scheduler's HTTP address (/metrics with the worker's stages)
#   cluster_roots      "label class pid" of every process started: class "gantry" (the
#                      frontends, the scheduler, the worker: their own CPU is Gantry's, their
#                      children's the actions') or "infra" (MinIO, PostgreSQL, HAProxy: all
#                      of their process trees' CPU)

cluster_roots=()
cluster_addr=""
cluster_fe_http=()
cluster_sched_http=""
cluster_pgdir=""

# cluster_minio: the MinIO server binary, or nothing.
cluster_minio() {
  local m
  for m in "$(command -v minio 2>/dev/null || true)" "$REPO/.tools/bin/minio" "$(go env GOPATH 2>/dev/null)/bin/minio"; do
    if [ -n "$m" ] && [ -x "$m" ]; then echo "$m"; return; fi
  done
}

# cluster_pgbin: the newest PostgreSQL server's bin directory, or nothing.
cluster_pgbin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4,4 -rn); do
    if [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then echo "$d"; return; fi
  done
}

# cluster_check: says what is missing for the cluster variant, and fails, before any build.
cluster_check() {
  local ok=0
  [ -n "$(cluster_minio)" ] || { echo "cluster: no minio on PATH, in $REPO/.tools/bin or \$(go env GOPATH)/bin; scripts/install-test-deps.sh installs it" >&2; ok=1; }
  [ -n "$(cluster_pgbin)" ] || { echo "cluster: no PostgreSQL server under /usr/lib/postgresql/*/bin; install Debian's postgresql" >&2; ok=1; }
  [ -x /usr/sbin/haproxy ] || { echo "cluster: no /usr/sbin/haproxy; install Debian's haproxy" >&2; ok=1; }
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    echo "cluster: running as root, and initdb refuses root, but there is no postgres user" >&2; ok=1
  fi
  return $ok
}

# cluster_wait WHAT CMD...: polls CMD every 0.1 s for up to 60 s; on failure says WHAT.
cluster_wait() {
  local what="$1"; shift
  local i
  for i in $(seq 600); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "cluster: $what within 60 s" >&2
  return 1
}

cluster_add() { cluster_roots+=("$1 $2 $3"); }

# cluster_healthz_has ADDR REGEXP: whether ADDR's /healthz matches REGEXP.
cluster_healthz_has() { curl -sf "http://$1/healthz" 2>/dev/null | grep -Eq "$2"; }

# cluster_worker_cores ADDR N: whether the scheduler at ADDR has registered workers with at
# least N cores.
cluster_worker_cores() {
  curl -sf "http://$1/metrics" 2>/dev/null |
    awk -v n="$2" '$1 == "gantry_worker_cores" { found = ($2 >= n) } END { exit !found }'
}

# cluster_start DIR LOGPREFIX SLOTS: starts everything, waits until the leader is published
# to both frontends and the worker (SLOTS cores) registered through the balancer.
cluster_start() {
  local dir="$1" logs="$2" slots="$3"
  mkdir -p "$dir"
  local minio pgbin
  minio=$(cluster_minio)
  pgbin=$(cluster_pgbin)
  local s3_port s3_console pg_port lb_port fe1 fe1h fe2 fe2h sched schedh
  s3_port=$(free_port); s3_console=$(free_port); pg_port=$(free_port); lb_port=$(free_port)
  fe1=$(free_port); fe1h=$(free_port); fe2=$(free_port); fe2h=$(free_port)
  sched=$(free_port); schedh=$(free_port)
  export AWS_ACCESS_KEY_ID=gantrybench AWS_SECRET_ACCESS_KEY=gantrybench-secret

  # The bucket.
  mkdir -p "$dir/minio"
  MINIO_UPDATE=off MINIO_BROWSER=off MINIO_ROOT_USER="$AWS_ACCESS_KEY_ID" \
    MINIO_ROOT_PASSWORD="$AWS_SECRET_ACCESS_KEY" "$minio" server "$dir/minio" --quiet \
    --address "127.0.0.1:$s3_port" --console-address "127.0.0.1:$s3_console" \
    >"$logs.minio.log" 2>&1 &
  cluster_add minio infra $!

  # The state store. Not under DIR: its parents are closed to the postgres user.
  cluster_pgdir=$(mktemp -d "${TMPDIR:-/tmp}/gantry-bench-pg.XXXXXX")
  local asuser=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$cluster_pgdir"
    asuser=(setpriv --reuid=postgres --regid=postgres --clear-groups --)
  fi
  mkdir -p "$cluster_pgdir/sock" && chmod 700 "$cluster_pgdir/sock"
  [ "$(id -u)" = 0 ] && chown postgres: "$cluster_pgdir/sock"
  (cd "$cluster_pgdir" && LC_ALL=C LANG=C "${asuser[@]}" "$pgbin/initdb" -D "$cluster_pgdir/data" \
    -U postgres -A trust -E UTF8 --locale=C --no-sync >"$logs.initdb.log" 2>&1) ||
    { cat "$logs.initdb.log" >&2; echo "cluster: initdb failed" >&2; return 1; }
  (cd "$cluster_pgdir" && exec env LC_ALL=C LANG=C "${asuser[@]}" "$pgbin/postgres" -D "$cluster_pgdir/data" \
    -p "$pg_port" -k "$cluster_pgdir/sock" -c listen_addresses=127.0.0.1 -c max_connections=100 \
    -c shared_buffers=32MB -c log_min_messages=warning >"$logs.postgres.log" 2>&1) &
  cluster_add postgres infra $!

  cluster_wait "MinIO did not answer (log: $logs.minio.log)" \
    curl -sf "http://127.0.0.1:$s3_port/minio/health/live" || return 1
  cluster_wait "PostgreSQL did not accept connections (log: $logs.postgres.log)" \
    "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -U postgres || return 1
  "$pgbin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres gantry ||
    { echo "cluster: createdb failed" >&2; return 1; }

  local store="scheduler:
  store:
    backend: postgres
    dsn: postgres://postgres@127.0.0.1:$pg_port/gantry?sslmode=disable
"
  cat >"$dir/frontend.yaml" <<EOF
${store}worker:
  enabled: false
storage:
  cas:
    backend: s3
  action_cache:
    backend: s3
  s3:
    endpoint: http://127.0.0.1:$s3_port
    bucket: gantry
    path_style: true
    create_bucket: true
EOF
  cat >"$dir/scheduler.yaml" <<EOF
${store}cluster:
  cas: 127.0.0.1:$lb_port
  advertise: 127.0.0.1:$sched
EOF
  cat >"$dir/haproxy.cfg" <<EOF
global
  maxconn 4096
defaults
  mode tcp
  timeout connect 5s
  timeout client 10m
  timeout server 10m
frontend gantry
  bind 127.0.0.1:$lb_port
  default_backend frontends
backend frontends
  balance roundrobin
  server fe1 127.0.0.1:$fe1 check inter 1s
  server fe2 127.0.0.1:$fe2 check inter 1s
EOF

  # The first frontend creates the bucket before the second starts.
  local i=1 p
  for p in "$fe1 $fe1h" "$fe2 $fe2h"; do
    set -- $p
    "$gantry" serve --role frontend --config "$dir/frontend.yaml" --listen "127.0.0.1:$1" \
      --http-listen "127.0.0.1:$2" --data-dir "$dir/fe$i" >"$logs.fe$i.log" 2>&1 &
    cluster_add "fe$i" gantry $!
    cluster_wait "frontend $i did not come up (log: $logs.fe$i.log)" \
      curl -sf "http://127.0.0.1:$2/healthz" || return 1
    cluster_fe_http+=("127.0.0.1:$2")
    i=$((i + 1))
  done
  /usr/sbin/haproxy -db -f "$dir/haproxy.cfg" >"$logs.haproxy.log" 2>&1 &
  cluster_add haproxy infra $!
  cluster_wait "HAProxy did not listen (log: $logs.haproxy.log)" \
    bash -c "exec 3<>/dev/tcp/127.0.0.1/$lb_port" || return 1
  "$gantry" serve --role scheduler --config "$dir/scheduler.yaml" --listen "127.0.0.1:$sched" \
    --http-listen "127.0.0.1:$schedh" --data-dir "$dir/sched" >"$logs.sched.log" 2>&1 &
  cluster_add sched gantry $!
  "$gantry" worker --scheduler "127.0.0.1:$lb_port" --work-dir "$dir/worker" --cores "$slots" \
    --id bench-worker >"$logs.worker.log" 2>&1 &
  cluster_add worker gantry $!
  cluster_addr="127.0.0.1:$lb_port"
  cluster_sched_http="127.0.0.1:$schedh"

  cluster_wait "the scheduler did not lead (log: $logs.sched.log)" \
    cluster_healthz_has "127.0.0.1:$schedh" 'leader term [1-9]' || return 1
  for p in "${cluster_fe_http[@]}"; do
    cluster_wait "frontend $p did not see the leader" \
      cluster_healthz_has "$p" "leader \"127.0.0.1:$sched\" term [1-9]" || return 1
  done
  cluster_wait "the worker did not register $slots cores (log: $logs.worker.log)" \
    cluster_worker_cores "127.0.0.1:$schedh" "$slots" || return 1
}

# cluster_stop: stops everything cluster_start started, clients first, and removes the
# PostgreSQL directory.
cluster_stop() {
  local i label class pid
  for ((i = ${#cluster_roots[@]} - 1; i >= 0; i--)); do
    read -r label class pid <<<"${cluster_roots[$i]}"
    # PostgreSQL's fast shutdown is SIGINT; SIGTERM waits for the sessions to end.
    if [ "$label" = postgres ]; then kill -INT "$pid" 2>/dev/null || true; else kill "$pid" 2>/dev/null || true; fi
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  cluster_roots=()
  cluster_fe_http=()
  cluster_sched_http=""
  cluster_addr=""
  if [ -n "$cluster_pgdir" ]; then rm -rf "$cluster_pgdir"; cluster_pgdir=""; fi
}

# tree_cpu "label class pid"...: for each root, "label class self children" in CPU seconds:
# self is the root's own CPU; children the CPU of its descendants, those it has reaped
# (cutime + cstime) and those still running, with what they reaped in turn.
tree_cpu() {
  local hz f line
  hz=$(getconf CLK_TCK)
  for f in /proc/[0-9]*/stat; do
    # The command name may hold spaces and parentheses: cut after its last ")".
    { read -r line <"$f"; } 2>/dev/null || continue
    printf '%s %s\n' "${line%% (*}" "${line##*) }"
  done | awk -v hz="$hz" -v roots="$*" '
    # $1 pid, then stat fields 3...: $2 state, $3 ppid, $13 utime, $14 stime, $15 cutime, $16 cstime
    { self[$1] = $13 + $14; kids[$1] = $15 + $16; parent[$1] = $3; child[$3] = child[$3] " " $1 }
    function sub_tree(p,   n, i, c, t) {
      t = kids[p]; n = split(child[p], c, " ")
      for (i = 1; i <= n; i++) t += self[c[i]] + sub_tree(c[i])
      return t
    }
    END {
      n = split(roots, r, " ")
      for (i = 1; i + 2 <= n; i += 3) printf "%s %s %.2f %.2f\n", r[i], r[i+1], self[r[i+2]] / hz, sub_tree(r[i+2]) / hz
    }'
}

# cpu_delta BEFORE AFTER: the per-root differences of two tree_cpu outputs.
cpu_delta() {
  awk 'NR == FNR { s[$1] = $3; k[$1] = $4; next } { printf "%s %s %.2f %.2f\n", $1, $2, $3 - s[$1], $4 - k[$1] }' "$1" "$2"
}

# s3_summary METRICS...: per S3 operation, requests and mean latency in ms over the scraped
# /metrics of the frontends.
s3_summary() {
  cat "$@" | awk '
    /^gantry_s3_request_duration_seconds_count\{/ { match($0, /op="[^"]*"/); op = substr($0, RSTART + 4, RLENGTH - 5); n[op] += $NF }
    /^gantry_s3_request_duration_seconds_sum\{/ { match($0, /op="[^"]*"/); op = substr($0, RSTART + 4, RLENGTH - 5); s[op] += $NF }
    END { for (op in n) if (n[op] > 0) printf "%s %d %.2f\n", op, n[op], 1000 * s[op] / n[op] }' | sort
}

# stage_summary METRICS: the worker's stages (input_fetch, execute, output_upload, worker),
# "stage mean_ms" each, from a scheduler's gantry_worker_stage_duration_seconds.
stage_summary() {
  awk '
    /^gantry_worker_stage_duration_seconds_count\{/ { match($0, /stage="[^"]*"/); st = substr($0, RSTART + 7, RLENGTH - 8); n[st] += $NF }
    /^gantry_worker_stage_duration_seconds_sum\{/ { match($0, /stage="[^"]*"/); st = substr($0, RSTART + 7, RLENGTH - 8); s[st] += $NF }
    END { for (st in n) if (n[st] > 0) printf "%s %.1f\n", st, 1000 * s[st] / n[st] }' "$@" | sort
}
