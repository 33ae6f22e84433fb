package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/loadgen"
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
