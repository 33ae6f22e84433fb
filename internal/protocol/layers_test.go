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
// execution service reports from this package, this package stays a leaf,
// and the scheduler returns errors of its own, not gRPC statuses. It asks
// the go command, as `go list` shows it.
func TestLayers(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		forbidden []string // packages pkg must not link, directly or not
		only      []string // if set, the only Gantry packages pkg may link
		imports   []string // packages pkg must not import itself
	}{
		{pkg: "internal/remote", forbidden: []string{"internal/scheduler", "internal/statestore", "internal/auth", "internal/execution"}},
		{pkg: "internal/client", forbidden: []string{"internal/scheduler", "internal/statestore", "internal/auth", "internal/execution"}},
		{pkg: "internal/config", forbidden: []string{"internal/scheduler"}},
		{pkg: "internal/history", forbidden: []string{"internal/execution"}},
		{pkg: "internal/protocol", only: []string{"internal/digest", "internal/protocol"}},
		{pkg: "internal/scheduler", imports: []string{"google.golang.org/grpc", "google.golang.org/grpc/status"}},
	} {
		if tc.imports != nil {
			own := goList(t, "-f", "{{join .Imports \"\\n\"}}", module+tc.pkg)
			for _, f := range tc.imports {
				if slices.Contains(own, f) {
					t.Errorf("%s imports %s: return a scheduler.Error and let the service edge (internal/execution) give it a code", tc.pkg, f)
				}
			}
			continue
		}
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
	var deps []string
	out := goList(t, "-deps", "-f", "{{.ImportPath}}", module+pkg)
	for _, l := range out {
		if rel, ok := strings.CutPrefix(l, module); ok {
			deps = append(deps, rel)
		}
	}
	if !slices.Contains(deps, pkg) {
		t.Fatalf("go list -deps %s did not list the package itself: %q", pkg, out)
	}
	return deps
}

// goList is what `go list args...` prints, one entry a line.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list packages: %v", err)
	}
	out, err := exec.Command(goTool, append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}
