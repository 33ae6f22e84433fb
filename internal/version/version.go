// Package version reports Gantry's version and build information.
//
// Three kinds of build must each say what they are:
//   - release builds (scripts/package.sh) set Version and Commit with
//     -ldflags "-X github.com/gantry-build/gantry/internal/version.Version=v1.2.3
//     -X github.com/gantry-build/gantry/internal/version.Commit=abc123...";
//   - `go install github.com/gantry-build/gantry/cmd/gantry@VERSION` builds
//     get the module version from the build information (a pseudo-version such
//     as v0.0.0-20261126115841-d27874e0a1b2 ends in the commit);
//   - builds in a checkout get vcs.revision from the build information, and
//     -buildvcs=false builds get neither: they say "dev" and "unknown".
package version

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
)

// Version is set at link time with -ldflags "-X .../version.Version=v1.2.3".
// Left at "dev", the build information supplies the version when it has one.
var Version = "dev"

// Commit is set at link time with -ldflags "-X .../version.Commit=SHA".
// Left empty, the build information supplies it when it has one.
var Commit = ""

// Info is what a binary knows about its own build.
type Info struct {
	// Version is the release or module version, or "dev".
	Version string
	// Commit is the VCS revision (full, or the 12-character prefix a
	// pseudo-version carries), or "unknown".
	Commit string
	// Modified is true when the working tree had uncommitted changes.
	Modified bool
	// Time is the commit time (RFC 3339) when known.
	Time string
}

// Get returns this binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return resolve(Version, Commit, bi)
}

// pseudoRev matches the revision at the end of a Go pseudo-version
// (vX.Y.Z-yyyymmddhhmmss-abcdefabcdef, also with pre-release and +incompatible).
var pseudoRev = regexp.MustCompile(`[-.]\d{14}-([0-9a-f]{12})(\+.*)?$`)

// resolve combines the link-time values with the build information: what
// the release build set wins, then the module version and VCS settings.
func resolve(ldVersion, ldCommit string, bi *debug.BuildInfo) Info {
	info := Info{Version: ldVersion, Commit: ldCommit}
	if info.Version == "" {
		info.Version = "dev"
	}
	if bi == nil {
		if info.Commit == "" {
			info.Commit = "unknown"
		}
		return info
	}
	modVersion := bi.Main.Version
	if info.Version == "dev" && modVersion != "" && modVersion != "(devel)" {
		info.Version = modVersion
	}
	vcsRev := ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			vcsRev = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		case "vcs.time":
			info.Time = s.Value
		}
	}
	if info.Commit == "" {
		info.Commit = vcsRev
	}
	if info.Commit == "" {
		// `go install ...@version` builds from the module zip, which has
		// no VCS data; a pseudo-version still names the commit.
		if m := pseudoRev.FindStringSubmatch(modVersion); m != nil {
			info.Commit = m[1]
		}
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// String describes the version, VCS revision and toolchain.
func String() string {
	return Get().format()
}

func (i Info) format() string {
	extra := ""
	if i.Modified {
		extra += " (modified)"
	}
	if i.Time != "" {
		extra += " " + i.Time
	}
	return fmt.Sprintf("gantry %s\nrevision: %s%s\ngo: %s %s/%s\nreapi: v2.0 to v2.13\n", i.Version, i.Commit, extra, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
