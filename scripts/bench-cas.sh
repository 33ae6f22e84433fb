#!/bin/sh
# bench-cas.sh: the CAS as an outside client sees it. For each round and
# each gantry binary given (alternated, the order flipping every round), a
# fresh `gantry serve` (no worker) runs in its own process and
# `gantry bench cas` in another measures one operation; the server's CPU per
# run comes from /proc.
#
#   scripts/bench-cas.sh ROUNDS CONFIG.yaml "BENCH CAS ARGS" BINARY...
#   e.g. scripts/bench-cas.sh 3 /dev/null "--op read --size 256MiB" /tmp/old /tmp/new
#
# CONFIG.yaml is appended to "worker: {enabled: false}" (e.g. a file with
# "storage: {cas: {backend: memory}}"). Every run prints its RESULT line,
# prefixed with the round and binary, the server's and the client's CPU
# summed over the measured runs (finer than the per-run median at 10 ms
# resolution) and the server's peak RSS (VmHWM).
set -eu
rounds=$1 config=$2 args=$3
shift 3
port=18990
cfg=$(mktemp)
{ printf 'worker:\n  enabled: false\n'; cat "$config"; } >"$cfg"
r=1
while [ "$r" -le "$rounds" ]; do
	if [ $((r % 2)) -eq 1 ]; then order="$*"; else order=$(printf '%s\n' "$@" | tac | tr '\n' ' '); fi
	for bin in $order; do
		if "$bin" bench cas --server 127.0.0.1:$port --op batch-update --blobs 1 --runs 1 >/dev/null 2>&1; then
			echo "a server already answers on 127.0.0.1:$port; stop it first" >&2
			exit 1
		fi
		dir=$(mktemp -d)
		"$bin" serve --config "$cfg" --data-dir "$dir" --listen 127.0.0.1:$port --http-listen 127.0.0.1:$((port + 1)) >"$dir.log" 2>&1 &
		pid=$!
		i=0
		until "$bin" bench cas --server 127.0.0.1:$port --op batch-update --blobs 1 --runs 1 >/dev/null 2>&1; do
			i=$((i + 1))
			if [ $i -gt 100 ]; then echo "server $bin did not start; see $dir.log" >&2; kill $pid; exit 1; fi
			sleep 0.1
		done
		# A server that could not listen (the port taken) has exited: the
		# bench would measure whoever holds the port.
		if ! kill -0 $pid 2>/dev/null; then echo "server $bin exited; see $dir.log" >&2; exit 1; fi
		load=$(cut -d' ' -f1 /proc/loadavg)
		# shellcheck disable=SC2086
		out=$("$bin" bench cas --server 127.0.0.1:$port --server-pid $pid $args)
		res=$(echo "$out" | grep '^RESULT')
		sums=$(echo "$out" | sed -n 's/^run .*client CPU \([0-9]*\) ms, server CPU \([0-9]*\) ms.*/\1 \2/p' |
			awk '{c += $1; s += $2} END {printf "server_cpu_ms_sum=%d client_cpu_ms_sum=%d", s, c}')
		hwm=$(grep VmHWM /proc/$pid/status | tr -s ' ' | cut -d' ' -f2)
		echo "round=$r bin=$bin load=$load $res $sums server_peak_rss_mib=$((hwm / 1024))"
		kill $pid
		wait $pid 2>/dev/null || true
		rm -rf "$dir" "$dir.log"
	done
	r=$((r + 1))
done
rm -f "$cfg"
