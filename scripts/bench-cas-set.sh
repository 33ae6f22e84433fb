#!/bin/sh
# bench-cas-set.sh: the outside CAS figures of PERFORMANCE.md's headline
# table, for two gantry binaries alternated (the order flips every round),
# each run on a fresh `gantry serve` (scripts/bench-cas.sh):
#   br1, br4  BatchReadBlobs of 10,000 blobs of 1 KiB, 1,000 a call, one
#             and four calls in flight, disk store
#   read      ByteStream Read of 256 MiB, disk store
#   memw      256 MiB ByteStream writes into a memory store of max_size 1 GiB,
#             11 a server (warm-up included): full, eviction running
#   diskw     the same into NEW's disk store of the same max_size, the
#             yardstick of memw
#
#   scripts/bench-cas-set.sh ROUNDS OLD NEW
set -eu
rounds=$1 old=$2 new=$3
here=$(dirname "$0")
disk=$(mktemp) mem=$(mktemp)
printf 'storage:\n  cas:\n    max_size: 1GiB\n' >"$disk"
printf 'storage:\n  cas:\n    backend: memory\n    max_size: 1GiB\n' >"$mem"
r=1
while [ "$r" -le "$rounds" ]; do
	if [ $((r % 2)) -eq 1 ]; then a=$old b=$new; else a=$new b=$old; fi
	echo "## round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg), cpu $(grep some /proc/pressure/cpu)"
	"$here/bench-cas.sh" 1 "$disk" "--op batch-read --blobs 10000 --runs 10" "$a" "$b" | sed 's/^/br1 /'
	"$here/bench-cas.sh" 1 "$disk" "--op batch-read --blobs 10000 --runs 10 --in-flight 4" "$a" "$b" | sed 's/^/br4 /'
	"$here/bench-cas.sh" 1 "$disk" "--op read --size 256MiB --runs 5" "$a" "$b" | sed 's/^/read /'
	"$here/bench-cas.sh" 1 "$mem" "--op write --size 256MiB --runs 10" "$a" "$b" | sed 's/^/memw /'
	"$here/bench-cas.sh" 1 "$disk" "--op write --size 256MiB --runs 10" "$new" | sed 's/^/diskw /'
	r=$((r + 1))
done
echo "## end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg), cpu $(grep some /proc/pressure/cpu)"
rm -f "$disk" "$mem"
