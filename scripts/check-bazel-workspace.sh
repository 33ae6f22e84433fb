#!/usr/bin/env bash
# Builds and tests testdata/bazel/workspace LOCALLY (no remote flags) with each real
# Bazel client, to tell workspace problems apart from Gantry problems.
# Usage: scripts/check-bazel-workspace.sh [bazel4|bazel2]...   (default: both)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BAZEL4="${GANTRY_BAZEL4:-/usr/bin/bazel}"
BAZEL2="${GANTRY_BAZEL2:-$REPO/.tools/npm/node_modules/@bazel/bazel-linux_x64/bazel-2.1.0-linux-x86_64}"

versions=("$@")
[ "${#versions[@]}" -gt 0 ] || versions=(bazel4 bazel2)

status=0
for v in "${versions[@]}"; do
  case "$v" in
    bazel4) bin="$BAZEL4"; extra=(--nosandbox_debug) ;;
    bazel2) bin="$BAZEL2"; extra=() ;;
    *) echo "unknown client $v (want bazel4 or bazel2)" >&2; exit 2 ;;
  esac
  if ! [ -x "$bin" ]; then
    echo "$v: $bin missing; run scripts/install-test-deps.sh" >&2
    status=1
    continue
  fi
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/gantry-bazel-check.XXXXXX")"
  cp -r "$REPO/testdata/bazel" "$tmp/"
  root="$tmp/output_user_root"
  echo "=== $v: build + test //... in $tmp" >&2
  (
    cd "$tmp/bazel/workspace"
    trap '"$bin" --output_user_root="$root" shutdown >/dev/null 2>&1 || true' EXIT
    start=$SECONDS
    "$bin" --output_user_root="$root" build //... "${extra[@]}" --incompatible_strict_action_env
    "$bin" --output_user_root="$root" test //... "${extra[@]}" --incompatible_strict_action_env --test_output=errors
    if "$bin" --output_user_root="$root" build //:expected_failure "${extra[@]}" --incompatible_strict_action_env >"$tmp/fail.log" 2>&1; then
      echo "$v: //:expected_failure unexpectedly built" >&2; exit 1
    fi
    grep -q GANTRY_EXPECTED_FAILURE "$tmp/fail.log" || { cat "$tmp/fail.log" >&2; echo "$v: no GANTRY_EXPECTED_FAILURE in output" >&2; exit 1; }
    echo "=== $v: OK in $((SECONDS - start)) s" >&2
  ) || status=1
  chmod -R u+w "$tmp" 2>/dev/null || true
  rm -rf "$tmp"
done
exit $status
