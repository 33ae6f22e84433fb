package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// failoverTakeoverTimeout bounds the wait for the standby to report that it leads.
const failoverTakeoverTimeout = time.Minute

// TestFailover: two `gantry serve --role scheduler` processes share one PostgreSQL
// (started by the test; in CI it must be installed) behind one `gantry serve --role
// frontend`, which holds the CAS and action cache and runs the embedded worker (two
// cores). Bazel (--remote_retries=10) and the worker know only the frontend's address.
//
// For each Bazel client, on testdata/bazel/crash (see TestCrash):
//
//  1. Bazel builds //...; once crashKillAfter actions have completed and one more has
//     started, the leading scheduler is killed with SIGKILL. Nothing is restarted.
//  2. The standby takes over (its /healthz says "leader") and the same build, still
//     running, must complete (exit 0) with every output right.
//  3. From the action log: an action that had completed before the kill ran exactly
//     once; one that had not started ran exactly once (restored queued work and the
//     client's retried Execute meet in one execution). One that was running at the
//     kill may have run again (reported).
//  4. `bazel clean` and the same build: every action is a remote cache hit and none
//     runs.
func TestFailover(t *testing.T) {
	server := pgtest.Start(t)
	forEachBazel(t, func(t *testing.T, c *bazelClient) {
		runFailover(t, newCrashWorkspace(t, c), pgtest.CreateDatabase(t, server))
	})
}

func runFailover(t *testing.T, w *bazelWorkspace, dsn string) {
	started := time.Now()
	cfgDir := testDir(t, "failover-config")
	logPath := filepath.Join(cfgDir, "actions.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	store := fmt.Sprintf("scheduler:\n  heartbeat_interval: 1s\n  heartbeat_timeout: 5s\n  store:\n    backend: postgres\n    dsn: %q\n", dsn)
	feCfg := writeFile(t, filepath.Join(cfgDir, "frontend.yaml"), store+"worker:\n  enabled: true\n  id: failover-worker\n  cores: 2\n")
	fe := newCrashServer(t, "--role", "frontend", "--config", feCfg)
	fe.start()
	schedCfg := writeFile(t, filepath.Join(cfgDir, "scheduler.yaml"), store+fmt.Sprintf("cluster:\n  cas: %s\n  takeover_interval: 200ms\n", fe.GRPCAddr))
	a := newCrashServer(t, "--role", "scheduler", "--config", schedCfg)
	leader := a.start()
	waitLeading(t, leader, failoverTakeoverTimeout)
	b := newCrashServer(t, "--role", "scheduler", "--config", schedCfg)
	standby := b.start()
	if s := healthz(leader.HTTPAddr); !strings.Contains(s, "leader") {
		t.Fatalf("scheduler A's /healthz %q, want it leading", s)
	}
	if s := healthz(standby.HTTPAddr); !strings.Contains(s, "standby") {
		t.Fatalf("scheduler B's /healthz %q, want it standing by", s)
	}

	args := []string{
		"//...",
		"--remote_executor=grpc://" + fe.GRPCAddr,
		"--spawn_strategy=remote",
		"--genrule_strategy=remote",
		"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
		"--remote_retries=" + itoa(crashRemoteRetries),
		"--action_env=GANTRY_CRASH_LOG=" + logPath,
		"--jobs=16",
	}
	want := crashActions()
	w.mustRun("clean")
	build := &backgroundBuild{done: make(chan struct{})}
	go func() {
		defer close(build.done)
		build.res = w.runWithTimeout(crashBuildTimeout, "build", args...)
	}()
	t.Cleanup(func() {
		select {
		case <-build.done:
		case <-time.After(crashBuildTimeout + time.Minute):
			t.Errorf("the build did not end within %v", crashBuildTimeout+time.Minute)
		}
	})

	// 1. Kill the leader mid-build.
	buildStart := time.Now()
	var atKill crashLog
	var completed map[string]bool
	deadline := time.Now().Add(crashKillPointTimeout)
	for {
		select {
		case <-build.done:
			t.Fatalf("the build ended (%s) before %d actions had completed with another one started: nothing to fail over",
				build.describe(), crashKillAfter)
		default:
		}
		atKill = readCrashLog(t, logPath)
		completed = presentOutputs(w, want)
		if len(completed) >= crashKillAfter && len(atKill.inFlight(completed)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d actions completed (%d started), want %d completed and one more started before the kill",
				crashKillPointTimeout, len(completed), len(atKill.Starts), crashKillAfter)
		}
		time.Sleep(20 * time.Millisecond)
	}
	leader.kill9(t)
	killedAt := time.Now()
	inFlight := atKill.inFlight(completed)
	t.Logf("SIGKILL to the leading scheduler %v into the build: %d of %d actions completed, %d started without a result at Bazel %v",
		killedAt.Sub(buildStart).Round(time.Millisecond), len(completed), len(want), len(inFlight), inFlight)

	// 2. The standby takes over; the build completes.
	waitLeading(t, standby, failoverTakeoverTimeout)
	t.Logf("the standby leads %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	select {
	case <-build.done:
	case <-time.After(crashBuildTimeout + time.Minute):
		t.Fatalf("the build did not end within %v", crashBuildTimeout+time.Minute)
	}
	if build.res == nil {
		t.Fatal("the build could not run (see above)")
	}
	if build.res.ExitCode != 0 {
		t.Fatalf("the build failed after the leader was killed (%s), want it to ride through the takeover; its errors:\n%s",
			build.describe(), errorLines(build.res.Output))
	}
	t.Logf("the build completed: %s", build.describe())
	checkCrashOutputs(t, w, want)

	// 3. Executions.
	final := readCrashLog(t, logPath)
	checkRanOnceAcrossKill(t, want, final, atKill, completed, "the kill",
		"the new leader must answer it from the restored operation or the ActionCache")

	// 4. Everything from the action cache.
	w.mustRun("clean")
	before := len(final.Lines)
	res := w.runWithTimeout(crashBuildTimeout, "build", args...)
	if res.ExitCode != 0 {
		t.Errorf("building after bazel clean: exit code %d%s, want 0; output:\n%s", res.ExitCode, exitCodeHint(res.ExitCode), res.Output)
	} else {
		expectAllCacheHits(t, "build after the failover and bazel clean", summaryOf(t, res), len(want))
	}
	checkCrashOutputs(t, w, want)
	if after := readCrashLog(t, logPath); len(after.Lines) != before {
		t.Errorf("the build after bazel clean executed actions (%v), want every result from the ActionCache", after.Lines[before:])
	}
	t.Logf("%s: failover took %v", w.Client.Name, time.Since(started).Round(time.Millisecond))
}

func healthz(httpAddr string) string {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + httpAddr + "/healthz")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// waitLeading waits until the scheduler's /healthz says it leads.
func waitLeading(t *testing.T, p *crashProc, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := healthz(p.HTTPAddr)
		if strings.Contains(s, "leader") {
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("the scheduler exited while the test waited for it to lead: %v", p.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler did not lead within %v (/healthz: %q)", timeout, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
