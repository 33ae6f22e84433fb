package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/loadgen"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// TestScaleCI is the CI-sized run of `gantry bench scale` (issue 38): 200
// no-op workers with 4 slots each, in two processes of their own, drain
// 10,000 actions of 50 tenants and 200 invocations, queued at once as open
// Execute streams (a fifth of the clients drop their stream and follow
// with WaitExecution), against `gantry serve`. It checks that every action
// completes, that each is leased exactly once, and that the status pages,
// /metrics and `gantry queues show` stay bounded: they grow by no more
// than a fixed slack between the idle and the loaded server, where a page
// listing the queue would grow by hundreds of kilobytes. It asserts no
// timings (the machine is shared); the tool's report goes to the log.
//
// The server and the tool are built without -race even under -race: the
// race detector allows 8128 live goroutines, and a server holding 10,000
// Execute streams has more. The tool's code is race-tested in process by
// internal/loadgen's tests.
func TestScaleCI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the scale run takes about a minute")
	}
	bin := launcherBin(t)
	dir := testDir(t, "scale")
	cfg, err := exec.Command(bin, "bench", "scale", "--print-config").Output()
	if err != nil {
		t.Fatalf("gantry bench scale --print-config: %v", err)
	}
	cfgPath := filepath.Join(dir, "scale.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGantryBin(t, bin, "--config", cfgPath)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reportPath := filepath.Join(dir, "report.json")
	cmd := exec.CommandContext(ctx, bin, "bench", "scale",
		"--server", g.GRPCAddr, "--http", g.HTTPAddr, "--server-pid", strconv.Itoa(g.cmd.Process.Pid),
		"--workers", "200", "--slots", "4", "--worker-procs", "2",
		"--tenants", "50", "--invocations", "200", "--queued", "10000",
		"--mean-sleep", "2ms", "--drop", "0.2", "--timeout", "150s", "--json", reportPath)
	out, err := cmd.CombinedOutput()
	t.Logf("gantry bench scale:\n%s", out)
	if err != nil {
		t.Fatalf("gantry bench scale failed: %v", err)
	}
	b, err := os.ReadFile(reportPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep loadgen.ScaleReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("the report %s does not parse: %v", reportPath, err)
	}
	if rep.Completed != 10000 || rep.Errors != 0 {
		t.Errorf("%d of 10000 actions completed, %d failed (first: %s)", rep.Completed, rep.Errors, rep.FirstError)
	}
	if rep.LeasedTwice != 0 || rep.NeverLeased != 0 || rep.Refused != 0 {
		t.Errorf("exactly-once dispatch: %d actions leased twice, %d never leased, %d results refused", rep.LeasedTwice, rep.NeverLeased, rep.Refused)
	}
	if len(rep.PagesLoaded) == 0 {
		t.Fatal("the report times no pages")
	}
	for _, p := range rep.UnboundedPages() {
		t.Errorf("unbounded page: %s", p)
	}
}

// TestScaleFailoverCI is the CI-sized fail-over run of `gantry bench
// scale` (issue 38): 50 no-op workers with 4 slots each drain 2,000
// actions (mean sleep 200 ms, so leases are in flight) queued as open
// Execute streams through a `--role frontend` to two `--role scheduler`
// processes sharing one PostgreSQL (started by the test; CI must have
// it); 300 ms into the drain the tool kills the leading scheduler with
// SIGKILL. The clients retry as Bazel does (WaitExecution on their
// operation) and the workers register again with the leases they hold.
// It checks that actions were open at the kill, that every action
// completes and is leased exactly once across the takeover, that every
// client whose stream broke followed its operation again and that the
// workers took work from the new leader. It asserts no timings.
func TestScaleFailoverCI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the fail-over scale run takes about half a minute")
	}
	dsn := pgtest.Start(t)
	bin := launcherBin(t)
	dir := testDir(t, "scale-failover")
	cfg, err := exec.Command(bin, "bench", "scale", "--print-config").Output()
	if err != nil {
		t.Fatalf("gantry bench scale --print-config: %v", err)
	}
	store := fmt.Sprintf("scheduler:\n  store:\n    backend: postgres\n    dsn: %q\n", dsn)
	withStore := strings.Replace(string(cfg), "scheduler:\n", store, 1)
	if withStore == string(cfg) {
		t.Fatalf("the --print-config configuration has no scheduler section to add the store to:\n%s", cfg)
	}
	fe := startGantryBin(t, bin, "--role", "frontend", "--config", writeFile(t, filepath.Join(dir, "frontend.yaml"), withStore))
	schedCfg := writeFile(t, filepath.Join(dir, "scheduler.yaml"), withStore+fmt.Sprintf("cluster:\n  cas: %s\n  takeover_interval: 200ms\n", fe.GRPCAddr))
	a := newCrashServer(t, "--role", "scheduler", "--config", schedCfg)
	a.bin = bin
	leader := a.start()
	waitLeading(t, leader, failoverTakeoverTimeout)
	b := newCrashServer(t, "--role", "scheduler", "--config", schedCfg)
	b.bin = bin
	standby := b.start()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reportPath := filepath.Join(dir, "report.json")
	cmd := exec.CommandContext(ctx, bin, "bench", "scale",
		"--server", fe.GRPCAddr, "--http", leader.HTTPAddr, "--server-pid", strconv.Itoa(leader.cmd.Process.Pid),
		"--standby-http", standby.HTTPAddr, "--kill-after", "300ms",
		"--workers", "50", "--slots", "4", "--worker-procs", "2",
		"--tenants", "10", "--invocations", "40", "--queued", "2000",
		"--mean-sleep", "200ms", "--drop", "0.2", "--timeout", "150s", "--json", reportPath)
	out, err := cmd.CombinedOutput()
	t.Logf("gantry bench scale:\n%s", out)
	select {
	case <-leader.exited:
		leader.killed = true // by the tool: nothing to stop at the end
	case <-time.After(5 * time.Second):
	}
	if err != nil {
		t.Fatalf("gantry bench scale failed: %v", err)
	}
	if !leader.killed {
		t.Fatal("the leading scheduler still runs after the run: the tool did not kill it")
	}
	b2, err := os.ReadFile(reportPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep loadgen.ScaleReport
	if err := json.Unmarshal(b2, &rep); err != nil {
		t.Fatalf("the report %s does not parse: %v", reportPath, err)
	}
	if rep.Kill != "fail-over" || rep.KillError != "" || rep.KillProbeError != "" {
		t.Errorf("the report's kill %q, error %q, Execute after the kill %q; want a fail-over without errors", rep.Kill, rep.KillError, rep.KillProbeError)
	}
	if rep.OpenAtKill == 0 {
		t.Error("no action was open at the kill: the queue drained first, so nothing failed over (queue more, or kill sooner)")
	}
	if rep.Completed != 2000 || rep.Errors != 0 {
		t.Errorf("%d of 2000 actions completed, %d failed (first: %s)", rep.Completed, rep.Errors, rep.FirstError)
	}
	if rep.LeasedTwice != 0 || rep.NeverLeased != 0 {
		t.Errorf("exactly-once dispatch across the fail-over: %d actions leased twice, %d never leased", rep.LeasedTwice, rep.NeverLeased)
	}
	if rep.ClientsBroken == 0 || rep.ClientsBack != rep.ClientsBroken {
		t.Errorf("%d of %d clients whose stream broke at the kill followed their operation again; want all, and some", rep.ClientsBack, rep.ClientsBroken)
	}
	if rep.WorkersBack == 0 {
		t.Error("no worker took work from the new leader")
	}
}
