// Package bazeltest drives a real Bazel client over a private copy of the
// offline test workspace in testdata/bazel (its external repositories are
// local_repository stand-ins, see testdata/bazel/stubs), for the tests
// that judge Gantry with Bazel: test/e2e and test/chaos.
package bazeltest

import (
	"fmt"
	"os"
	"strings"
)

// Client is one real Bazel release.
type Client struct {
	// Name names it in tests and messages: bazel4 or bazel2.
	Name string
	// Version is the Bazel release, for messages.
	Version string
	// Path is the Bazel binary.
	Path string
	// StartupFlags go before the command of every invocation.
	StartupFlags []string
	// Flags go after the command of every build and test invocation.
	Flags []string
}

// Bazel4 is Debian's Bazel 4.2.3 (bazel-bootstrap), at $GANTRY_BAZEL4 or
// /usr/bin/bazel.
func Bazel4() *Client {
	path := os.Getenv("GANTRY_BAZEL4")
	if path == "" {
		path = "/usr/bin/bazel"
	}
	return &Client{
		Name:    "bazel4",
		Version: "4.2.3",
		Path:    path,
		// Debian's /etc/bazel/bazelrc turns --sandbox_debug on, which leaves the
		// sandboxes of local actions behind.
		Flags: []string{"--nosandbox_debug"},
	}
}

// Missing says why c cannot run ("" when its binary is there), with how
// to install it.
func (c *Client) Missing() string {
	st, err := os.Stat(c.Path)
	if err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return ""
	}
	return fmt.Sprintf("Bazel %s not found at %s (run scripts/install-test-deps.sh, or set GANTRY_%s)",
		c.Version, c.Path, strings.ToUpper(c.Name))
}
