package debian

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/deploy/internal/deploytest"
)

var units = []string{"gantry-serve@.service", "gantry-worker.service"}

func command(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// unitKeys reads the [Service] keys of a unit file (later values of a key
// are appended).
func unitKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			section = line
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && section == "[Service]" {
			keys[k] = append(keys[k], v)
		}
	}
	return keys
}

// TestDebianPackage installs the .deb scripts/package.sh built with dpkg,
// checks its files, the gantry user and the conffile, verifies the units
// with systemd-analyze, then starts gantry-serve@all's command line with the
// packaged configuration as the packaged user and runs one action on its
// embedded worker, and one on gantry-worker's command line started the same
// way. It purges the package at the end.
func TestDebianPackage(t *testing.T) {
	deb := deploytest.Dist(t, "gantry_*_amd64.deb")
	deploytest.RequireRoot(t, "dpkg -i installs system-wide")
	for _, tool := range []struct{ name, hint string }{{"dpkg", "Debian's dpkg"}, {"systemd-analyze", "Debian package systemd"}, {"setpriv", "Debian package util-linux"}} {
		deploytest.Tool(t, tool.name, tool.hint)
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "gantry").Output(); err == nil && strings.Contains(string(out), "installed") {
		t.Fatalf("a gantry package is installed already (%s); remove it (dpkg --purge gantry) before this test, which purges what it installs", out)
	}
	command(t, "dpkg", "-i", deb)
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "--purge", "gantry").CombinedOutput(); err != nil {
			t.Errorf("dpkg --purge gantry: %v\n%s", err, out)
		}
	})

	// Files, owners and modes.
	for path, want := range map[string]fs.FileMode{
		"/usr/bin/gantry":                               0o755,
		"/etc/gantry/gantry.yaml":                       0o640,
		"/lib/systemd/system/gantry-serve@.service":     0o644,
		"/lib/systemd/system/gantry-worker.service":     0o644,
		"/usr/share/bash-completion/completions/gantry": 0o644,
		"/usr/share/doc/gantry/OPERATIONS.md":           0o644,
		"/var/lib/gantry":                               fs.ModeDir | 0o750,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Errorf("the package did not install %s: %v", path, err)
			continue
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v; want %v", path, fi.Mode(), want)
		}
	}
	u, err := user.Lookup("gantry")
	if err != nil {
		t.Fatalf("the postinst did not create the gantry user: %v", err)
	}
	var uid, gid int
	fmt.Sscan(u.Uid, &uid)
	fmt.Sscan(u.Gid, &gid)
	for path, owner := range map[string][2]int{"/var/lib/gantry": {uid, gid}, "/etc/gantry/gantry.yaml": {0, gid}} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != owner[0] || int(st.Gid) != owner[1] {
			t.Errorf("%s: owner %d:%d; want %d:%d", path, st.Uid, st.Gid, owner[0], owner[1])
		}
	}
	if passwd := command(t, "getent", "passwd", "gantry"); !strings.HasSuffix(strings.TrimSpace(passwd), ":/usr/sbin/nologin") {
		t.Errorf("the gantry user can log in: %s", passwd)
	}
	if conffiles := command(t, "dpkg-query", "-W", "-f=${Conffiles}", "gantry"); !strings.Contains(conffiles, "/etc/gantry/gantry.yaml ") {
		t.Errorf("/etc/gantry/gantry.yaml is not a conffile: %q", conffiles)
	}
	version := command(t, "/usr/bin/gantry", "version")
	if strings.HasPrefix(version, "gantry dev") || strings.Contains(version, "revision: unknown") {
		t.Errorf("the packaged binary does not know its version and commit:\n%s", version)
	}

	// The units: systemd-analyze verify exits 0 on most mistakes, so any
	// output is one.
	verify := exec.Command("systemd-analyze", "verify", "gantry-serve@all.service", "gantry-serve@frontend.service", "gantry-serve@scheduler.service", "gantry-worker.service")
	verify.Dir = t.TempDir()
	if out, err := verify.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, unit := range units {
		keys := unitKeys(t, "/lib/systemd/system/"+unit)
		for _, kv := range [][2]string{{"Restart", "always"}, {"User", "gantry"}, {"Delegate", "yes"}} {
			if got := keys[kv[0]]; len(got) != 1 || got[0] != kv[1] {
				t.Errorf("%s: %s=%q; want %s", unit, kv[0], got, kv[1])
			}
		}
		// Options that break the worker's bubblewrap sandbox (see the
		// comments in gantry-worker.service).
		for _, k := range []string{"NoNewPrivileges", "PrivateUsers", "RestrictNamespaces", "ProtectKernelTunables", "ProtectKernelLogs", "ProtectProc", "ProtectControlGroups", "SystemCallFilter", "CapabilityBoundingSet"} {
			if v, ok := keys[k]; ok {
				t.Errorf("%s sets %s=%v, which breaks bubblewrap", unit, k, v)
			}
		}
	}

	// gantry-serve@all's command line, as systemd would run it: the
	// unit's user, working directory and ExecStart, with the instance
	// name; only the ports move off the packaged 8980/9090, which other
	// tests on the machine may hold.
	keys := unitKeys(t, "/lib/systemd/system/gantry-serve@.service")
	argv := strings.Fields(strings.ReplaceAll(keys["ExecStart"][0], "%i", "all"))
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", deploytest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", deploytest.FreePort(t))
	argv = append(argv, "--listen", grpcAddr, "--http-listen", httpAddr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serve := exec.CommandContext(ctx, "setpriv", append([]string{"--reuid", "gantry", "--regid", "gantry", "--init-groups", "--"}, argv...)...)
	serve.Dir = keys["WorkingDirectory"][0]
	serve.Env = []string{"PATH=/usr/bin:/bin"}
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	serve.Stdout, serve.Stderr = logFile, logFile
	serve.Cancel = func() error { return serve.Process.Signal(syscall.SIGTERM) }
	serve.WaitDelay = 20 * time.Second
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		serve.Wait()
		logFile.Close()
		close(exited)
	}()
	stop := func() {
		cancel()
		<-exited
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("gantry serve's log:\n%s", log)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the packaged gantry serve did not become healthy within 60s: %v", err)
		}
		select {
		case <-exited:
			t.Fatalf("the packaged gantry serve exited: %v", serve.ProcessState)
		case <-time.After(100 * time.Millisecond):
		}
	}

	runCtx, runCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer runCancel()
	run := exec.CommandContext(runCtx, "/usr/bin/gantry", "run", "--no-cache", "--server", grpcAddr, "--", "/bin/sh", "-c", "id -un; pwd")
	run.Dir = t.TempDir()
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("gantry run against the packaged server: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	// The embedded worker runs actions as the service's user, in exec
	// roots under the packaged data directory.
	if len(lines) != 2 || lines[0] != "gantry" || !strings.HasPrefix(lines[1], "/var/lib/gantry/worker/") {
		t.Fatalf("the action printed %q; want the gantry user and an exec root under /var/lib/gantry/worker", out)
	}
	// gantry-worker's command line against that server, with the unit's
	// environment (GANTRY_SERVER, GANTRY_WORKER_ARGS as
	// /etc/default/gantry-worker would set them); an action pinned to it
	// runs there, not on the embedded worker.
	wkeys := unitKeys(t, "/lib/systemd/system/gantry-worker.service")
	var wargv []string
	for _, f := range strings.Fields(wkeys["ExecStart"][0]) {
		if f == "$GANTRY_WORKER_ARGS" {
			wargv = append(wargv, "--id", "deb-test-worker")
			continue
		}
		wargv = append(wargv, f)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	worker := exec.CommandContext(wctx, "setpriv", append([]string{"--reuid", "gantry", "--regid", "gantry", "--init-groups", "--"}, wargv...)...)
	worker.Dir = wkeys["WorkingDirectory"][0]
	worker.Env = []string{"PATH=/usr/bin:/bin", "GANTRY_SERVER=" + grpcAddr}
	var wlog strings.Builder
	worker.Stdout, worker.Stderr = &wlog, &wlog
	worker.Cancel = func() error { return worker.Process.Signal(syscall.SIGTERM) }
	worker.WaitDelay = 20 * time.Second
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	wexited := make(chan struct{})
	go func() {
		worker.Wait()
		close(wexited)
	}()
	defer func() {
		wcancel()
		<-wexited
		if t.Failed() {
			t.Logf("gantry worker's log:\n%s", wlog.String())
		}
	}()
	pinned := exec.CommandContext(runCtx, "/usr/bin/gantry", "run", "--no-cache", "--server", grpcAddr, "--platform", "Worker=deb-test-worker", "--", "/bin/sh", "-c", "id -un; pwd")
	pinned.Dir = t.TempDir()
	out, err = pinned.CombinedOutput()
	if err != nil {
		t.Fatalf("gantry run on the packaged gantry-worker: %v\n%s", err, out)
	}
	lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || lines[0] != "gantry" || !strings.HasPrefix(lines[1], "/var/lib/gantry/standalone-worker/") {
		t.Fatalf("the pinned action printed %q; want the gantry user and an exec root under /var/lib/gantry/standalone-worker", out)
	}
	wcancel()
	<-wexited
	if !worker.ProcessState.Success() {
		t.Errorf("gantry worker did not stop cleanly on SIGTERM: %v", worker.ProcessState)
	}

	stop()
	if !serve.ProcessState.Success() {
		t.Errorf("gantry serve did not stop cleanly on SIGTERM: %v", serve.ProcessState)
	}
	// What the service wrote belongs to the service's user.
	if err := filepath.WalkDir("/var/lib/gantry", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed while walking
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid {
			return fmt.Errorf("%s belongs to uid %d, not gantry", p, st.Uid)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}
