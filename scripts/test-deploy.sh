#!/usr/bin/env bash
# Builds the release artifacts with scripts/package.sh (static binary, .deb,
# OCI image) into a temporary directory and runs the deployment tests of the
# deploy/ module (its own Go module, so that go-containerregistry and the
# Kubernetes API types stay out of Gantry's go.mod):
#   deploy/debian  dpkg -i, the files, systemd-analyze verify, gantry serve
#                  with the packaged config as the gantry user, one action
#   deploy/image   the image's config; podman runs it and one action
#   deploy/helm    helm lint, helm template with each value set, the objects
#                  decoded strictly into k8s.io/api types
#   deploy/goinstall  go install .../cmd/gantry@latest from a local proxy;
#                  gantry version names the version and commit
# scripts/test.sh runs it after the main suite. Under CI=true a missing tool
# (helm, nfpm, podman, runc, systemd-analyze) or not being root fails.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
DIST="$(mktemp -d "${TMPDIR:-/tmp}/gantry-dist.XXXXXX")"
trap 'rm -rf "$DIST"' EXIT
export PATH="$REPO/.tools/bin:$PATH"

echo "== deploy: scripts/package.sh"
start=$SECONDS
DIST="$DIST" scripts/package.sh all
echo "deploy: packaging took $((SECONDS - start))s"

echo "== deploy: go vet, go test (deploy module)"
start=$SECONDS
cd deploy
# -mod=mod: when the main module gains dependencies that internal/config
# imports, this module's go.mod and go.sum follow without a manual tidy.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
go vet ./...
GANTRY_DIST="$DIST" go test -count=1 -timeout 20m "$@" ./...
echo "deploy: tests took $((SECONDS - start))s"
