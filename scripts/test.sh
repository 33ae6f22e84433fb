#!/usr/bin/env bash
# Runs Gantry's whole test suite. Installs what the tests need (Bazel 4.2.3
# and 2.1.0, protoc, PostgreSQL, bubblewrap, helm, nfpm, podman) when it is
# missing, then runs gofmt, go vet and every test under the race detector,
# including the end-to-end tests with real Bazel clients and the fault loop
# (test/chaos: 3 minutes with seed 39, 3 with a random one it prints), then
# builds and checks the deployment artifacts (scripts/test-deploy.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.tools/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change these files (run gofmt -w):"; echo "$unformatted"; exit 1
fi
echo "== go vet"
go vet ./...
echo "== go test -race"
go test -race -count=1 -timeout 60m "$@" ./...
# The deployment artifacts (.deb, OCI image, Helm chart), built and checked
# by the deploy/ module's tests.
echo "== deploy (scripts/test-deploy.sh)"
scripts/test-deploy.sh
# Every fuzz target for a few seconds (about 2 minutes in all); always in CI,
# locally with FUZZ=1.
if [ "${CI:-}" = "true" ] || [ "${FUZZ:-}" = "1" ]; then
  echo "== go test -fuzz (scripts/fuzz.sh)"
  scripts/fuzz.sh
fi
