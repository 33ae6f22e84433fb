// Package goinstall checks the README's install line,
// `go install github.com/gantry-build/gantry/cmd/gantry@latest`: the go
// command builds Gantry from a module zip without VCS data, and `gantry
// version` must still name the version and the commit.
package goinstall

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"

	"github.com/gantry-build/gantry/deploy/internal/deploytest"
)

const modulePath = "github.com/gantry-build/gantry"

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		deploytest.Missing(t, "git %s: %v (the test needs the repository's git history)", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// TestGoInstallLatest publishes the committed HEAD as a pseudo-version in a
// file:// module proxy, runs `go install ...@latest` against it (the
// dependencies come from the module cache or the usual proxy), and checks
// that the installed binary reports that version and commit.
func TestGoInstallLatest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gantry")
	}
	root := deploytest.RepoRoot(t)
	rev := git(t, root, "rev-parse", "HEAD")
	when, err := time.Parse(time.RFC3339, git(t, root, "show", "-s", "--format=%cI", "HEAD"))
	if err != nil {
		t.Fatal(err)
	}
	version := module.PseudoVersion("v0", "", when, rev[:12])

	proxy := t.TempDir()
	dir := filepath.Join(proxy, modulePath, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	zf, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	// The committed tree only, as the real proxy would serve it (git
	// archive rather than zip.CreateFromVCS, which needs a .git directory
	// and so fails in linked worktrees).
	tree := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, rev, tree)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, out)
	}
	if err := zip.CreateFromDir(zf, module.Version{Path: modulePath, Version: version}, tree); err != nil {
		t.Fatalf("zipping the module at %s: %v", rev, err)
	}
	if err := zf.Close(); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]any{"Version": version, "Time": when.UTC()})
	for name, data := range map[string][]byte{"list": []byte(version + "\n"), version + ".mod": gomod, version + ".info": info} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	gobin := t.TempDir()
	upstream, _ := exec.Command("go", "env", "GOPROXY").Output()
	// CGO_ENABLED=0 and -trimpath as scripts/package.sh builds, so that
	// the dependencies come from the build cache; they do not change what
	// the version reports.
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", modulePath+"/cmd/gantry@latest")
	cmd.Dir = t.TempDir() // outside any module, as a user would
	cmd.Env = append(os.Environ(),
		"GOBIN="+gobin,
		"GOFLAGS=",
		"CGO_ENABLED=0",
		"GOPROXY=file://"+filepath.ToSlash(proxy)+","+strings.TrimSpace(string(upstream)),
		"GOSUMDB=off") // the module is not in the checksum database
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s/cmd/gantry@latest: %v\n%s", modulePath, err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "gantry"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("gantry %s\nrevision: %s\n", version, rev[:12])
	if !strings.HasPrefix(string(out), want) {
		t.Fatalf("go install'ed gantry version prints\n%s\nwant it to start with\n%s", out, want)
	}
}
