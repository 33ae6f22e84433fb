#!/usr/bin/env bash
# Builds Gantry's release artifacts into $DIST (default dist/):
#   gantry                     static binary (CGO_ENABLED=0), version and
#                              commit set with -ldflags (internal/version)
#   gantry_VERSION_amd64.deb   Debian package (nfpm, deploy/debian/nfpm.yaml)
#   gantry-image.tar           OCI image archive (deploy/cmd/gantry-image; load
#                              it with `podman load -i` or push it with crane)
# Usage: scripts/package.sh [binary|deb|image|all]   (default all)
# GANTRY_VERSION overrides the version (default: the tag at HEAD, else a
# pseudo-version v0.0.0-DATE-COMMIT as the go command would write it).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
what="${1:-all}"
DIST="${DIST:-$REPO/dist}"
mkdir -p "$DIST"
DIST="$(cd "$DIST" && pwd)"

# nfpm, pinned; scripts/install-test-deps.sh installs the same version into .tools/bin.
NFPM_VERSION=v2.45.2

COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ -z "${GANTRY_VERSION:-}" ]; then
  GANTRY_VERSION="$(git describe --tags --exact-match --match 'v*' 2>/dev/null || true)"
  if [ -z "$GANTRY_VERSION" ]; then
    when="$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD 2>/dev/null || echo 00000000000000)"
    GANTRY_VERSION="v0.0.0-$when-${COMMIT:0:12}"
  fi
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    GANTRY_VERSION="$GANTRY_VERSION+dirty"
  fi
fi
export GANTRY_VERSION COMMIT

build_binary() {
  local pkg=github.com/gantry-build/gantry/internal/version
  echo "package: gantry $GANTRY_VERSION ($COMMIT) -> $DIST/gantry" >&2
  CGO_ENABLED=0 go build -trimpath -buildvcs=false \
    -ldflags "-s -w -X $pkg.Version=$GANTRY_VERSION -X $pkg.Commit=$COMMIT" \
    -o "$DIST/gantry" ./cmd/gantry
}

build_deb() {
  [ -x "$DIST/gantry" ] || build_binary
  local stage="$DIST/deb-stage"
  rm -rf "$stage" && mkdir -p "$stage"
  cp "$DIST/gantry" deploy/debian/* docs/OPERATIONS.md docs/CONFIGURATION.md README.md "$stage/"
  "$DIST/gantry" completion bash >"$stage/gantry.bash-completion"
  # Debian versions: no leading v; '~' sorts a pseudo-version before releases.
  local debver="${GANTRY_VERSION#v}"
  debver="${debver//-/\~}"
  debver="${debver//+/\~}"
  local nfpm=(go run "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION")
  if [ -x "$REPO/.tools/bin/nfpm" ] && go version -m "$REPO/.tools/bin/nfpm" 2>/dev/null | grep -q "mod[[:space:]]*github.com/goreleaser/nfpm/v2[[:space:]]*$NFPM_VERSION"; then
    nfpm=("$REPO/.tools/bin/nfpm")
  fi
  rm -f "$DIST"/gantry_*.deb
  (cd "$stage" && GANTRY_VERSION="$debver" "${nfpm[@]}" package --packager deb --config nfpm.yaml --target "$DIST/")
  rm -rf "$stage"
  ls "$DIST"/gantry_*.deb >&2
}

build_image() {
  [ -x "$DIST/gantry" ] || build_binary
  (cd deploy && go run -mod=mod ./cmd/gantry-image --binary "$DIST/gantry" --version "$GANTRY_VERSION" \
    --revision "$COMMIT" --out "$DIST/gantry-image.tar")
}

case "$what" in
  binary) build_binary ;;
  deb) build_binary; build_deb ;;
  image) build_binary; build_image ;;
  all) build_binary; build_deb; build_image ;;
  *) echo "usage: scripts/package.sh [binary|deb|image|all]" >&2; exit 2 ;;
esac
