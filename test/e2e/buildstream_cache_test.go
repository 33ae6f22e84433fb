package e2e

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// bstTimeout bounds one bst command: each takes a few seconds here.
const bstTimeout = 2 * time.Minute

// TestBuildStreamArtifactCache: BuildStream 1.6 (Debian's buildstream)
// with `gantry serve` as its artifact server. A project whose base is a
// sysroot of Debian's static busybox builds a `manual` element locally;
// `bst push` stores both artifacts in Gantry (Remote Asset PushDirectory
// under urn:fdc:buildstream.build:... after a FetchDirectory miss, which
// must be NOT_FOUND); with the local cache wiped, `bst pull` brings them
// back and `bst checkout` is identical to the local build's checkout; with
// the cache wiped again, `bst build` pulls instead of building.
func TestBuildStreamArtifactCache(t *testing.T) {
	bst := requireBuildStream1(t)
	dir := testDir(t, "bst-cache")
	project := filepath.Join(dir, "project")
	bstSysroot(t, filepath.Join(project, "sysroot"))
	bstWriteFiles(t, project, map[string]string{
		"project.conf": "name: hello\nelement-path: elements\n",
		"elements/base.bst": `kind: import
sources:
- kind: local
  path: sysroot
`,
		// Runs the sysroot's busybox (the version it prints is the
		// sysroot's), and leaves a file, an executable and a symlink.
		"elements/hello.bst": `kind: manual
depends:
- filename: base.bst
  type: build
config:
  install-commands:
  - mkdir -p %{install-root}/usr/share/hello %{install-root}/usr/bin
  - busybox | head -n 1 > %{install-root}/usr/share/hello/built-with
  - printf 'hello from a BuildStream artifact in Gantry\n' > %{install-root}/usr/share/hello/greeting
  - printf '#!/bin/sh\ncat /usr/share/hello/greeting\n' > %{install-root}/usr/bin/hello
  - chmod 755 %{install-root}/usr/bin/hello
  - ln -s hello %{install-root}/usr/bin/hi
`,
	})
	gantryCfg := filepath.Join(dir, "gantry.yaml")
	if err := os.WriteFile(gantryCfg, []byte("worker: {enabled: false}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGantry(t, "--config", gantryCfg)

	cache := filepath.Join(dir, "xdg-cache")
	local := filepath.Join(dir, "local.conf")
	remote := filepath.Join(dir, "remote.conf")
	bstWriteFiles(t, dir, map[string]string{
		"local.conf":  "scheduler: {fetchers: 1, builders: 1, pushers: 1}\n",
		"remote.conf": fmt.Sprintf("scheduler: {fetchers: 1, builders: 1, pushers: 1}\nartifacts:\n  url: http://%s\n  push: true\n", g.GRPCAddr),
	})
	// Everything BuildStream writes stays in the test's directory.
	env := []string{
		"HOME=" + filepath.Join(dir, "home"),
		"XDG_CACHE_HOME=" + cache,
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg-config"),
		"XDG_DATA_HOME=" + filepath.Join(dir, "xdg-data"),
		"LC_ALL=C.UTF-8",
	}
	run := func(conf string, args ...string) string {
		t.Helper()
		argv := append([]string{bst, "--no-interactive", "--no-colors", "--config", conf}, args...)
		res := mustRunCmd(t, project, env, bstTimeout, argv...)
		return res.stdout + res.stderr
	}
	wipe := func() {
		t.Helper()
		if err := removeAll(cache); err != nil {
			t.Fatal(err)
		}
	}

	// A local build, with no artifact server.
	out := run(local, "build", "hello.bst")
	if !strings.Contains(out, "Running install-commands") {
		t.Fatalf("bst build did not run the install-commands:\n%s", tail(out))
	}
	built := filepath.Join(dir, "built")
	run(local, "checkout", "hello.bst", built)
	want := bstCheckoutTree(t, built)
	if got := want["usr/share/hello/built-with"]; !strings.Contains(got, "BusyBox v") {
		t.Fatalf("the element did not run the sysroot's busybox: built-with is %q", got)
	}

	// Push both artifacts: the server has neither (NOT_FOUND), so both go.
	out = run(remote, "push", "--deps", "all", "hello.bst")
	for _, el := range []string{"base.bst", "hello.bst"} {
		if !bstHasLine(out, "push:"+el, "Pushed artifact") {
			t.Errorf("bst push did not push %s:\n%s", el, tail(out))
		}
	}
	if misses := g.counter(t, `gantry_remote_asset_fetches_total{kind="directory",result="not_pushed"}`); misses < 2 {
		t.Errorf("Gantry counted %v FetchDirectory misses before the pushes; want 2 or more", misses)
	}
	out = run(remote, "push", "--deps", "all", "hello.bst")
	if !strings.Contains(out, "already has") {
		t.Errorf("a second bst push did not find the artifacts on the server:\n%s", tail(out))
	}

	// Wipe the local cache, pull, check out: identical to the local build.
	wipe()
	out = run(remote, "pull", "--deps", "all", "hello.bst")
	for _, el := range []string{"base.bst", "hello.bst"} {
		if !bstHasLine(out, "pull:"+el, "Pulled artifact") {
			t.Errorf("bst pull did not pull %s:\n%s", el, tail(out))
		}
	}
	pulled := filepath.Join(dir, "pulled")
	run(remote, "checkout", "hello.bst", pulled)
	bstSameCheckout(t, want, bstCheckoutTree(t, pulled))

	// Wipe again: a build pulls hello.bst and builds nothing.
	wipe()
	out = run(remote, "build", "hello.bst")
	if !bstHasLine(out, "pull:hello.bst", "Pulled artifact") || strings.Contains(out, "Running install-commands") || !strings.Contains(out, "Build Queue: processed 0,") {
		t.Errorf("bst build after wiping the cache did not pull instead of building:\n%s", tail(out))
	}
	again := filepath.Join(dir, "again")
	run(remote, "checkout", "hello.bst", again)
	bstSameCheckout(t, want, bstCheckoutTree(t, again))
	if hits := g.counter(t, `gantry_remote_asset_fetches_total{kind="directory",result="cached"}`); hits < 3 {
		t.Errorf("Gantry answered %v FetchDirectory calls from pushed artifacts; want 3 or more", hits)
	}
}

// requireBuildStream1 returns the path of BuildStream 1's bst after checking
// the tools its local builds need (bubblewrap, a static busybox for the
// sysroot); it skips the test when one is missing, and fails it under
// CI=true. It skips under -short.
func requireBuildStream1(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("real-client end-to-end test: skipped with -short")
	}
	missing := func(msg string) {
		t.Helper()
		msg += " (run scripts/install-test-deps.sh: Debian's buildstream and busybox-static)"
		if inCI() {
			t.Fatal(msg + "; CI=true, so a missing tool is a failure")
		}
		t.Skip(msg)
	}
	bst, err := exec.LookPath("bst")
	if err != nil {
		missing("bst not found on PATH")
	}
	if out, err := exec.Command(bst, "--version").CombinedOutput(); err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "1.") {
		missing(fmt.Sprintf("bst --version: %q, %v; this test drives BuildStream 1.x", strings.TrimSpace(string(out)), err))
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		missing("bwrap (bubblewrap, BuildStream's sandbox) not found on PATH")
	}
	if !bstStaticELF(bstBusybox) {
		missing(bstBusybox + " is missing or not a static executable")
	}
	return bst
}

// bstBusybox is where Debian's busybox-static installs busybox.
const bstBusybox = "/bin/busybox"

// bstStaticELF reports whether path is an ELF executable without a program
// interpreter: it runs in a sysroot that has no libc.
func bstStaticELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return f.Type == elf.ET_EXEC || f.Type == elf.ET_DYN
}

// bstSysroot makes dir a sysroot of the static busybox: bin/busybox and a
// symlink to /bin/busybox for every applet, where `busybox --install -s`
// would put it.
func bstSysroot(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bstBusybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command(bstBusybox, "--list-full").Output()
	if err != nil {
		t.Fatalf("busybox --list-full: %v", err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "bin/busybox" || strings.Contains(applet, "..") {
			continue
		}
		p := filepath.Join(dir, applet)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/bin/busybox", p); err != nil {
			t.Fatal(err)
		}
	}
}

// bstWriteFiles writes files (relative path: content) under dir.
func bstWriteFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// bstHasLine reports whether output has a line naming task (BuildStream's
// "push:hello.bst") that says what.
func bstHasLine(output, task, what string) bool {
	for _, line := range strings.Split(output, "\n") {
		if strings.Contains(line, task) && strings.Contains(line, what) {
			return true
		}
	}
	return false
}

// bstCheckoutTree describes every entry under dir: a file's mode and
// bytes, a symlink's target, a directory.
func bstCheckoutTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			tree[rel] = "symlink to " + target
			return err
		case info.IsDir():
			tree[rel] = "directory"
		default:
			data, err := os.ReadFile(p)
			tree[rel] = fmt.Sprintf("file %v\n%s", info.Mode().Perm(), data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tree) == 0 {
		t.Fatalf("bst checkout left nothing in %s", dir)
	}
	return tree
}

// bstSameCheckout fails the test where got differs from want.
func bstSameCheckout(t *testing.T, want, got map[string]string) {
	t.Helper()
	var names []string
	for n := range want {
		names = append(names, n)
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if want[n] != got[n] {
			t.Errorf("checkout differs from the local build's at %s:\nlocal:  %q\npulled: %q", n, want[n], got[n])
		}
	}
}
