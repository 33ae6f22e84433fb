package main

import (
	"strconv"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// TestBenchSpawnRate: --spawn-rate measures /bin/true 4 at a time before
// and after the load and reports the run's rate as a ratio to it.
func TestBenchSpawnRate(t *testing.T) {
	fake := &fakeExecutor{actions: map[digest.Digest]bool{}}
	addr := serve(t, true, func(g *grpc.Server, cas blobstore.Store) {
		fake.cas = cas
		repb.RegisterExecutionServer(g, fake)
	})
	stdout, stderr, result, err := runBenchCommand(t, "--server", addr, "--actions", "20", "--spawn-rate", "200ms")
	if err != nil {
		t.Fatalf("bench: %v\n%s\n%s", err, stdout, stderr)
	}
	spawn := map[string]float64{}
	for _, line := range strings.Split(stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, "SPAWN "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("SPAWN %s=%q is not a number", k, v)
				}
				spawn[k] = f
			}
		}
	}
	rate, _ := strconv.ParseFloat(result["rate"], 64)
	if mean := (spawn["before"] + spawn["after"]) / 2; spawn["before"] <= 0 || spawn["after"] <= 0 || spawn["mean"] < mean-0.01 || spawn["mean"] > mean+0.01 {
		t.Fatalf("SPAWN line %v; want positive rates before and after, and their mean\n%s", spawn, stdout)
	}
	if want := rate / spawn["mean"]; spawn["ratio"] < want*0.99-0.001 || spawn["ratio"] > want*1.01+0.001 {
		t.Errorf("SPAWN ratio=%v; want the run's rate %v over the mean %v = %v", spawn["ratio"], rate, spawn["mean"], want)
	}
	// Without the flag there is no baseline.
	stdout, _, _, err = runBenchCommand(t, "--server", addr, "--actions", "5")
	if err != nil || strings.Contains(stdout, "SPAWN") {
		t.Errorf("without --spawn-rate: %v, output\n%s", err, stdout)
	}
	if _, _, _, err := runBenchCommand(t, "--server", addr, "--spawn-rate", "-1s"); err == nil || !strings.Contains(err.Error(), "--spawn-rate") {
		t.Errorf("a negative --spawn-rate: %v, want an error naming the flag", err)
	}
}
