#!/bin/bash
# Checks the tree artifact (a directory output) and a genrule that consumed it.
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

[ -d tree ] || fail "tree is not a directory"
[ "$(cat tree/a.txt)" = "alpha" ] || fail "tree/a.txt"
[ "$(cat tree/sub/b.txt)" = "beta" ] || fail "tree/sub/b.txt"
[ "$(cat tree/sub/deeper/c.txt)" = "gamma" ] || fail "tree/sub/deeper/c.txt"

expected='./a.txt
./sub/b.txt
./sub/deeper/c.txt
alpha
beta
gamma'
[ "$(cat tree_listing.txt)" = "$expected" ] || fail "tree_listing.txt: got '$(cat tree_listing.txt)'"
echo "PASS"
