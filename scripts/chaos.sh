#!/usr/bin/env bash
# Runs Gantry's fault loop (test/chaos, issue 39) for operators: a whole
# cluster on this machine's loopback (HAProxy, 2 frontends on MinIO, 2
# schedulers on PostgreSQL, 3 workers, one sandboxed, one on a small disk)
# under a continuous load whose answers are all checked, while a seeded
# schedule kills, pauses, stops and cuts its parts. Prints the seed first and
# a summary at the end (faults by kind, submissions, runs per action,
# retries, the longest wait); on a broken check it fails with the seed, the
# fault log and the first wrong answer. See docs/OPERATIONS.md, "What Gantry
# survives".
#
#   scripts/chaos.sh                      30 minutes, a random seed
#   scripts/chaos.sh -d 5m -s 1234        5 minutes, replaying seed 1234
#   scripts/chaos.sh -r                   the nodes built with -race
#
# Needs Go, MinIO, PostgreSQL's server, HAProxy, bubblewrap and util-linux
# (scripts/install-test-deps.sh installs them); run as root for the sandbox's
# uid and the small disk (a tmpfs). GANTRY_CHAOS_KEEP=1 keeps the directories
# (logs, data) of a failed run.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=30m
seed=""
race=()
while getopts "d:s:rh" opt; do
  case "$opt" in
    d) duration="$OPTARG" ;;
    s) seed="$OPTARG" ;;
    r) race=(-race) ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
  esac
done
if [ -z "$seed" ]; then
  seed=$(( (RANDOM << 15 | RANDOM) + 1 ))
fi
echo "chaos: seed $seed for $duration (replay: $0 -d $duration -s $seed)"

# The test's own timeout: the loop, the drain (at most ~4 minutes) and the
# checks, with room to spare.
case "$duration" in
  *h) secs=$(( ${duration%h} * 3600 )) ;;
  *m) secs=$(( ${duration%m} * 60 )) ;;
  *s) secs=${duration%s} ;;
  *) echo "chaos: -d $duration: give whole hours, minutes or seconds (30m, 2h, 90s)" >&2; exit 2 ;;
esac
timeout=$(( secs + 900 ))s
# CI=true: a missing part fails the run instead of skipping it.
CI=true exec go test "${race[@]}" -count=1 -v -timeout "$timeout" ./test/chaos \
  -run 'TestChaos$' -chaos.duration "$duration" -chaos.seed "$seed"
