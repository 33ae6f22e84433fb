#!/bin/bash
# Checks the outputs of the genrule chain and of the genrule that runs a C tool.
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

first="$(cat pair_first.txt)"
[ "$first" = "HELLO FROM GANTRY E2E" ] || fail "pair_first.txt: got '$first'"
second="$(cat pair_second.txt)"
[ "$second" = "22" ] || fail "pair_second.txt: got '$second'"
greeting="$(cat greeter_output.txt)"
[ "$greeting" = "hello, gantry (from C)" ] || fail "greeter_output.txt: got '$greeting'"
echo "PASS"
