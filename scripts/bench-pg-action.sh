#!/usr/bin/env bash
# What one no-op action costs on the PostgreSQL store, from outside (issue 43): `gantry serve`
# (no embedded worker) on a fresh database, 8 no-op workers of one slot each and the load, in
# three processes, as in command H. Per run: 3,000 actions at 64 in flight (warm-up), N measured
# at 64 in flight, then 500 at one in flight. Printed per run: actions/s; Gantry's and
# PostgreSQL's CPU per action (utime+stime from /proc: the server, and the postmaster with its
# children); from pg_stat_database / pg_stat_user_tables, per action: transactions (each one
# round trip), rows inserted, updated (of which HOT), deleted, and WAL bytes; p50 at one in flight.
# The statistics are read 11 s after the load stops (backends report them at most once a second,
# idle ones after 10 s).
#
# Usage: PGADMIN=postgres://postgres@127.0.0.1:5432 PGDATA=/path/to/data scripts/bench-pg-action.sh ROUNDS VARIANT...
#   PGADMIN: a DSN (without a database) allowed to create and drop databases;
#   PGDATA: the server's data directory (for postmaster.pid: its CPU is read from /proc).
#   VARIANT: BINARY (the postgres store), BINARY@K (with scheduler.store.commits_in_flight K),
#   or embedded:BINARY (the embedded store, for the ratio: no database figures).
#   Variants are alternated per round; N (default 4000) actions measured.
set -euo pipefail
rounds=$1
shift
: "${PGADMIN:?set PGADMIN to a DSN allowed to create databases}" "${PGDATA:?set PGDATA to the data directory of the PostgreSQL server}"
work=$(mktemp -d /tmp/bench-pg-action.XXXXXX)
server="" workers="" db=""
cleanup() {
  for p in $workers $server; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "$db" ] && psql -q "$PGADMIN/postgres" -c "drop database if exists $db" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
n=${N:-4000}
port=18941
cpu() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pgcpu() {
  local pm t=0 p
  pm=$(head -1 "$PGDATA/postmaster.pid")
  for p in $pm $(pgrep -P "$pm"); do t=$((t + $(cpu "$p"))); done
  echo $t
}
stats() {
  psql -At "$PGADMIN/$db" -c "select (select xact_commit from pg_stat_database where datname = current_database()),
    coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0),
    coalesce(sum(n_tup_del), 0), pg_current_wal_lsn() - '0/0' from pg_stat_user_tables"
}
run() { # round variant
  local r=$1 variant=$2 bin data s0 s1 c0 c1 p0 p1 res c1p50 depth="" embedded=""
  bin=${variant#embedded:}
  [ "$bin" != "$variant" ] && embedded=1
  if [[ $bin == *@* ]]; then depth=${bin##*@} bin=${bin%@*}; fi
  data=$(mktemp -d "$work/data.XXXX")
  if [ -n "$embedded" ]; then
    printf 'worker:\n  enabled: false\n' >"$data/pg.yaml"
  else
    db=gantry_bench_$$_${r}_$port
    psql -q "$PGADMIN/postgres" -c "create database $db" >/dev/null
    printf 'worker:\n  enabled: false\nscheduler:\n  store: {backend: postgres, dsn: "%s/%s"%s}\n' "$PGADMIN" "$db" "${depth:+, commits_in_flight: $depth}" >"$data/pg.yaml"
  fi
  "$bin" serve --config "$data/pg.yaml" --data-dir "$data" --listen 127.0.0.1:$port --http-listen 127.0.0.1:$((port + 1000)) 2>"$data/serve.log" &
  server=$!
  for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  "$bin" bench --server 127.0.0.1:$port --workers-only --noop-workers 8 --noop-slots 1 --duration 600s >"$data/workers.log" 2>&1 &
  workers=$!
  "$bin" bench --server 127.0.0.1:$port --concurrency 64 --actions 3000 --output-file=false >/dev/null 2>&1
  [ -z "$embedded" ] && sleep 11
  s0=0 s1=0
  [ -z "$embedded" ] && s0=$(stats)
  c0=$(cpu "$server") p0=$(pgcpu)
  res=$("$bin" bench --server 127.0.0.1:$port --concurrency 64 --actions "$n" --output-file=false 2>&1 | grep RESULT)
  c1=$(cpu "$server") p1=$(pgcpu)
  [ -z "$embedded" ] && sleep 11 && s1=$(stats)
  c1p50=$("$bin" bench --server 127.0.0.1:$port --concurrency 1 --actions 500 --output-file=false 2>&1 | grep RESULT | sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p')
  echo "$r $variant rate=$(sed -n 's/.*rate=\([0-9.]*\).*/\1/p' <<<"$res") gantry_cpu_ms=$(awk -v a="$c0" -v b="$c1" -v n="$n" -v t="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", (b - a) * 1000 / t / n }') pg_cpu_ms=$(awk -v a="$p0" -v b="$p1" -v n="$n" -v t="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", (b - a) * 1000 / t / n }') \
$(paste -d' ' <(tr '|' '\n' <<<"$s0") <(tr '|' '\n' <<<"$s1") | awk -v n="$n" 'BEGIN { split("xacts ins upd hot del wal_bytes", h, " ") } { printf "%s=%.2f ", h[NR], ($2 - $1) / n }')c1p50=$c1p50 load=$(cut -d' ' -f1 /proc/loadavg)"
  kill "$workers" "$server" 2>/dev/null || true
  wait "$workers" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  workers="" server=""
  [ -n "$db" ] && psql -q "$PGADMIN/postgres" -c "drop database $db" >/dev/null
  db=""
  port=$((port + 2))
}
for r in $(seq "$rounds"); do
  for v in "$@"; do run "$r" "$v"; done
done
