package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestResolve covers each kind of build: release (ldflags), go install of a
// tag and of a pseudo-version, a checkout with VCS stamping, and none.
func TestResolve(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "d27874e0a1b2c3d4e5f60718293a4b5c6d7e8f90"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-11-26T11:58:41Z"}}
	for _, tc := range []struct {
		name                    string
		ldVersion, ldCommit     string
		bi                      *debug.BuildInfo
		wantVersion, wantCommit string
		wantModified            bool
	}{
		{"release", "v1.4.0", "0123456789abcdef0123456789abcdef01234567", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "v1.4.0", "0123456789abcdef0123456789abcdef01234567", true},
		{"release without build info", "v1.4.0", "abc", nil, "v1.4.0", "abc", false},
		{"go install of a tag", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0", "unknown", false},
		{"go install of a pseudo-version", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261126115841-d27874e0a1b2"}}, "v0.0.0-20261126115841-d27874e0a1b2", "d27874e0a1b2", false},
		{"go install after a tag", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.1-0.20261126115841-d27874e0a1b2"}}, "v1.4.1-0.20261126115841-d27874e0a1b2", "d27874e0a1b2", false},
		{"checkout", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261126115841-d27874e0a1b2+dirty"}, Settings: vcs}, "v0.0.0-20261126115841-d27874e0a1b2+dirty", "d27874e0a1b2c3d4e5f60718293a4b5c6d7e8f90", true},
		{"buildvcs=false", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev", "unknown", false},
		{"empty ldflags", "", "", nil, "dev", "unknown", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.ldVersion, tc.ldCommit, tc.bi)
			if got.Version != tc.wantVersion || got.Commit != tc.wantCommit || got.Modified != tc.wantModified {
				t.Fatalf("resolve = %+v; want version %q commit %q modified %v", got, tc.wantVersion, tc.wantCommit, tc.wantModified)
			}
		})
	}
}

// buildAndRun builds testdata/printversion with the given go build flags
// and returns what it prints.
func buildAndRun(t *testing.T, flags ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "printversion")
	args := append([]string{"build", "-o", bin}, flags...)
	args = append(args, "./testdata/printversion")
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("running %s: %v", bin, err)
	}
	return string(out)
}

// TestReleaseBuildLdflags builds with the ldflags scripts/package.sh uses
// and checks that the binary reports them.
func TestReleaseBuildLdflags(t *testing.T) {
	const pkg = "github.com/gantry-build/gantry/internal/version"
	out := buildAndRun(t, "-buildvcs=false", "-ldflags", "-X "+pkg+".Version=v9.8.7 -X "+pkg+".Commit=feedfacefeedfacefeedfacefeedfacefeedface")
	if !strings.HasPrefix(out, "gantry v9.8.7\nrevision: feedfacefeedfacefeedfacefeedfacefeedface\n") {
		t.Fatalf("release build prints %q", out)
	}
}

// TestBuildWithoutVCS: a -buildvcs=false build without ldflags still says
// what it is.
func TestBuildWithoutVCS(t *testing.T) {
	out := buildAndRun(t, "-buildvcs=false")
	if !strings.HasPrefix(out, "gantry dev\nrevision: unknown\ngo: go1.") {
		t.Fatalf("-buildvcs=false build prints %q", out)
	}
}

// TestCheckoutBuild: a build in a git checkout with VCS stamping reports
// the checked-out commit.
func TestCheckoutBuild(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout (or no git): %v", err)
	}
	// The go command stamps no VCS data in a linked worktree (.git is a
	// file there); CI and plain clones have a .git directory.
	if fi, err := os.Stat("../../.git"); err != nil || !fi.IsDir() {
		t.Skip("a linked git worktree: go build stamps no VCS data here")
	}
	out := buildAndRun(t, "-buildvcs=true")
	if !strings.Contains(out, "\nrevision: "+strings.TrimSpace(string(head))) {
		t.Fatalf("checkout build at %s prints %q", head, out)
	}
}
