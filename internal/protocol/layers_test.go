package protocol

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path prefix of Gantry's packages.
const module = "github.com/gantry-build/gantry/"

// TestLayers keeps the packages below the server from leaning on it: the
// client library links none of the server (it reads header names from
// this package), config owns its defaults, the history reads what the
// execution service reports from this package, and this package stays a
// leaf. It asks the go command, as `go list -deps` shows it.
func TestLayers(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		forbidden []string // packages pkg must not link, directly or not
		only      []string // if set, the only Gantry packages pkg may link
	}{
		{pkg: "internal/remote", forbidden: []string{"internal/scheduler", "internal/statestore", "internal/auth", "internal/execution"}},
		{pkg: "internal/client", forbidden: []string{"internal/scheduler", "internal/statestore", "internal/auth", "internal/execution"}},
		{pkg: "internal/config", forbidden: []string{"internal/scheduler"}},
		{pkg: "internal/history", forbidden: []string{"internal/execution"}},
		{pkg: "internal/protocol", only: []string{"internal/digest", "internal/protocol"}},
	} {
		deps := goListDeps(t, tc.pkg)
		for _, f := range tc.forbidden {
			if slices.Contains(deps, f) {
				t.Errorf("%s links %s (go list -deps ./%s): move what it uses into a package below both, such as internal/protocol", tc.pkg, f, tc.pkg)
			}
		}
		if tc.only != nil {
			for _, d := range deps {
				if !slices.Contains(tc.only, d) {
					t.Errorf("%s links %s: it may link only %s", tc.pkg, d, strings.Join(tc.only, ", "))
				}
			}
		}
	}
}

// goListDeps is the Gantry packages pkg links (itself included), relative
// to the module.
func goListDeps(t *testing.T, pkg string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", module+pkg)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var deps []string
	for _, l := range strings.Fields(string(out)) {
		if rel, ok := strings.CutPrefix(l, module); ok {
			deps = append(deps, rel)
		}
	}
	if !slices.Contains(deps, pkg) {
		t.Fatalf("go list -deps %s did not list the package itself: %q", pkg, out)
	}
	return deps
}
