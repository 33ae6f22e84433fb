// Package version reports Gantry's version and build information.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set at link time with -ldflags "-X .../version.Version=v1.2.3".
var Version = "dev"

// String describes the version, VCS revision and toolchain.
func String() string {
	rev, modified, when := "unknown", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			case "vcs.time":
				when = " " + s.Value
			}
		}
	}
	return fmt.Sprintf("gantry %s\nrevision: %s%s%s\ngo: %s %s/%s\nreapi: v2.0 to v2.13\n", Version, rev, modified, when, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
