#!/usr/bin/env bash
# Installs the tools Gantry's real-client end-to-end tests need:
#   - Bazel 4.2.3 (Debian's bazel-bootstrap, /usr/bin/bazel)
#   - Bazel 2.1.0 (npm package @bazel/bazel-linux_x64@2.1.0 under $REPO/.tools/npm)
#   - protobuf-compiler, bubblewrap, postgresql (server binaries), chromium (headless),
#     haproxy (the load balancer of the multi-node test)
#   - BuildStream 1.6 (Debian's buildstream) and busybox-static, for BuildStream
#     with Gantry as its artifact server
#   - MinIO server (built with `go install` into $REPO/.tools/bin, about 5 minutes)
#   - helm and nfpm (pinned, built with `go install` into $REPO/.tools/bin) and
#     podman, runc and systemd (systemd-analyze) for the deployment tests
#   - remotetool and rexec (remote-apis-sdks, pinned, built from the Go module proxy
#     into $REPO/.tools/bin)
#
# Idempotent and non-interactive: it installs only what is missing, so a second run
# returns in well under a second. Runs as root (as CI does), or through sudo when not
# root and sudo exists.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export DEBIAN_FRONTEND=noninteractive

log() { echo "install-test-deps: $*" >&2; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n env DEBIAN_FRONTEND=noninteractive)
  else
    SUDO=()
    log "not root and no sudo: apt-get installs will likely fail"
  fi
fi

# --- Debian packages -------------------------------------------------------------
# Each entry: package name and a command that tells whether it is installed already.
missing=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# bazel-bootstrap provides /usr/bin/bazel (4.2.3).
if ! [ -x /usr/bin/bazel ] || ! have_pkg bazel-bootstrap; then
  missing+=(bazel-bootstrap)
fi
if ! command -v protoc >/dev/null 2>&1; then
  missing+=(protobuf-compiler)
fi
if ! command -v bwrap >/dev/null 2>&1; then
  missing+=(bubblewrap)
fi
# busybox-static: a static /bin/busybox, the sysroot of the chroot mode's tests.
if ! have_pkg busybox-static; then
  missing+=(busybox-static)
fi
# postgresql: we need the server binaries (initdb, postgres) under /usr/lib/postgresql/*/bin.
if ! compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
  missing+=(postgresql)
fi
# chromium: headless browser for the status page's end-to-end test.
if ! command -v chromium >/dev/null 2>&1; then
  missing+=(chromium)
fi

# haproxy: the load balancer in front of the frontends of the multi-node test.
if ! [ -x /usr/sbin/haproxy ]; then
  missing+=(haproxy)
fi

# cmake, make and gcc: the C project the client commands (gantry cc, gantry
# batch) build in test/e2e/client_test.go.
for tool in cmake make gcc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    missing+=("$tool")
  fi
done

# buildstream (1.6, /usr/bin/bst) and busybox-static (/bin/busybox, the
# sysroot of its project): BuildStream with Gantry as its artifact server
# (test/e2e/buildstream_cache_test.go).
if ! command -v bst >/dev/null 2>&1; then
  missing+=(buildstream)
fi
if ! have_pkg busybox-static; then
  missing+=(busybox-static)
fi

# podman and runc: the OCI image's run test (deploy/image); crun, podman's
# default runtime, refuses the CI machines' hybrid cgroups. systemd:
# systemd-analyze verify of the Debian package's units.
if ! command -v podman >/dev/null 2>&1; then
  missing+=(podman)
fi
if ! command -v runc >/dev/null 2>&1; then
  missing+=(runc)
fi
if ! command -v systemd-analyze >/dev/null 2>&1; then
  missing+=(systemd)
fi

# default-jdk-headless: javac and java for the persistent javac worker's
# test and benchmark (internal/server/persistentjavac_test.go).
if ! command -v javac >/dev/null 2>&1; then
  missing+=(default-jdk-headless)
fi

if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
else
  log "Debian packages present"
fi

# --- Bazel 2.1.0 from npm --------------------------------------------------------
BAZEL2="$REPO/.tools/npm/node_modules/@bazel/bazel-linux_x64/bazel-2.1.0-linux-x86_64"
if ! [ -x "$BAZEL2" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    log "npm missing: installing Debian's npm"
    "${SUDO[@]}" apt-get update -q
    "${SUDO[@]}" apt-get install -y -q --no-install-recommends npm </dev/null
  fi
  log "installing Bazel 2.1.0 into $REPO/.tools/npm"
  mkdir -p "$REPO/.tools/npm"
  npm install --no-audit --no-fund --prefix "$REPO/.tools/npm" @bazel/bazel-linux_x64@2.1.0 </dev/null
  chmod +x "$BAZEL2"
else
  log "Bazel 2.1.0 present"
fi

# --- MinIO server ----------------------------------------------------------------
# The S3 backend's tests run a real MinIO (internal/testutil/miniotest looks on PATH,
# then here, then in $(go env GOPATH)/bin). Pinned: the newest version the Go module
# proxy serves; it builds in about 5 minutes on two cores.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
MINIO="$REPO/.tools/bin/minio"
if ! [ -x "$MINIO" ]; then
  if ! command -v go >/dev/null 2>&1; then
    log "go missing: cannot build MinIO; install Go first"
    exit 1
  fi
  mkdir -p "$REPO/.tools/bin"
  GOPATH_BIN="$(go env GOPATH | cut -d: -f1)/bin/minio"
  if [ -x "$GOPATH_BIN" ] && go version -m "$GOPATH_BIN" 2>/dev/null | grep -q "mod[[:space:]]*github.com/minio/minio[[:space:]]*$MINIO_VERSION"; then
    log "copying MinIO $MINIO_VERSION from $GOPATH_BIN into $REPO/.tools/bin"
    cp "$GOPATH_BIN" "$MINIO.tmp" && mv "$MINIO.tmp" "$MINIO"
  else
    log "building MinIO $MINIO_VERSION into $REPO/.tools/bin (about 5 minutes)"
    GOBIN="$REPO/.tools/bin" go install "github.com/minio/minio@$MINIO_VERSION" </dev/null
  fi
else
  log "MinIO present"
fi

# --- helm and nfpm ----------------------------------------------------------------
# Pinned; built from the Go module proxy into .tools/bin (helm about 4 minutes of
# CPU, nfpm about 1), reused from $(go env GOPATH)/bin when that one is the
# pinned version. scripts/package.sh and the deploy/ tests look in .tools/bin.
go_tool() { # name module version
  local name="$1" module="$2" version="$3" bin="$REPO/.tools/bin/$1"
  local pkg="$module/cmd/$name" modpath="${module}"
  if [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -q "mod[[:space:]]*$modpath[[:space:]]*$version"; then
    log "$name $version present"
    return
  fi
  mkdir -p "$REPO/.tools/bin"
  local gp
  gp="$(go env GOPATH | cut -d: -f1)/bin/$name"
  if [ -x "$gp" ] && go version -m "$gp" 2>/dev/null | grep -q "mod[[:space:]]*$modpath[[:space:]]*$version"; then
    cp "$gp" "$bin.tmp" && mv "$bin.tmp" "$bin"
    return
  fi
  log "building $name $version into $REPO/.tools/bin"
  GOBIN="$REPO/.tools/bin" go install "$pkg@$version" </dev/null
}
go_tool helm helm.sh/helm/v3 v3.22.0
go_tool nfpm github.com/goreleaser/nfpm/v2 v2.45.2

# --- remotetool and rexec (remote-apis-sdks) ----------------------------------------
# The SDK's own clients, for test/e2e/sdk_test.go. Pinned to a commit: the module
# proxy refuses the module's version list, so `go install ...@latest` (and even
# `go install ...@<pseudo-version>`, which reads that list for deprecations) fails;
# `go get` of the pinned pseudo-version in a scratch module and `go build` work.
# About 1 minute of CPU.
SDK_MODULE=github.com/bazelbuild/remote-apis-sdks
SDK_VERSION=v0.0.0-20250924144931-212b8b213918
sdk_current() { # name
  local bin="$REPO/.tools/bin/$1"
  [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -q "mod[[:space:]]*$SDK_MODULE[[:space:]]*$SDK_VERSION"
}
if sdk_current remotetool && sdk_current rexec; then
  log "remotetool and rexec $SDK_VERSION present"
else
  log "building remotetool and rexec $SDK_VERSION into $REPO/.tools/bin"
  scratch="$REPO/.tools/src/remote-apis-sdks"
  rm -rf "$scratch"
  mkdir -p "$scratch" "$REPO/.tools/bin"
  (
    cd "$scratch"
    export GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off
    go mod init gantry-test-tools/remote-apis-sdks >/dev/null 2>&1
    go get "$SDK_MODULE/go/cmd/remotetool@$SDK_VERSION" "$SDK_MODULE/go/cmd/rexec@$SDK_VERSION"
    go build -o "$REPO/.tools/bin/" "$SDK_MODULE/go/cmd/remotetool" "$SDK_MODULE/go/cmd/rexec"
  ) </dev/null
fi

# --- .gitignore ------------------------------------------------------------------
GI="$REPO/.gitignore"
touch "$GI"
for line in '.tools/' 'gantry-data/' 'bazel-*' 'dist/'; do
  grep -qxF -- "$line" "$GI" || echo "$line" >>"$GI"
done

log "done: bazel4=/usr/bin/bazel bazel2=$BAZEL2 minio=$MINIO haproxy=/usr/sbin/haproxy"
