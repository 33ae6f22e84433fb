package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/remote"
)

// criticalPathJobs: "a" is quick but a chain of two jobs waits for it;
// "leaf" takes longer and nothing waits for it. Each writes when it
// started (nanoseconds).
const criticalPathJobs = `jobs:
  - name: leaf
    command: [sh, -c, "date +%s%N > out/leaf.txt; sleep 0.6"]
    outputs: [out/leaf.txt]
  - name: a
    command: [sh, -c, "date +%s%N > out/a.txt"]
    outputs: [out/a.txt]
  - name: b
    command: [sh, -c, "cat out/a.txt > out/b.txt"]
    inputs: [out/a.txt]
    outputs: [out/b.txt]
    deps: [a]
  - name: c
    command: [sh, -c, "cat out/b.txt > out/c.txt"]
    inputs: [out/b.txt]
    outputs: [out/c.txt]
    deps: [b]
`

// TestBatchSendsTheCriticalPath runs gantry batch against a served farm
// with one core. The first run teaches the server the jobs' durations.
// In the second, "leaf" and "a" wait at the server while another
// client's actions hold the worker: by its own duration "leaf" would go
// first (longest first), but gantry batch tells the server that a chain
// waits for "a" (the gantry-critical-path header), so "a" starts first.
func TestBatchSendsTheCriticalPath(t *testing.T) {
	srv := startExecServerWith(t, func(c *config.Config) { c.Worker.Cores = 1 })
	server := srv.GRPCAddr()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"jobs.yaml": criticalPathJobs})
	if code, stdout, stderr := gantryBatch(t, dir, server, "--json", "--no-cache", "jobs.yaml"); code != 0 {
		t.Fatalf("first run: exit %d\n%s\n%s", code, stdout, stderr)
	}

	// Another client's actions hold the only core and the worker's
	// second lease (the one it fetches inputs for while the first runs).
	conn, err := dialServer(server)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other, err := remote.New(ctx, conn, "", remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 2)
	for i, sleep := range []string{"1.5", "0.1"} {
		blocker, err := other.Prepare(remote.Spec{Args: []string{"sh", "-c", "sleep " + sleep}, LocalRoot: t.TempDir(), NoCache: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Upload(ctx, blocker); err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _, err := other.Execute(ctx, blocker, nil)
			blocked <- err
		}()
		for srv.Scheduler().Stats().Leased <= i {
			select {
			case err := <-blocked:
				t.Fatalf("a blocking action ended before it was seen leased: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}

	if code, stdout, stderr := gantryBatch(t, dir, server, "--json", "--no-cache", "jobs.yaml"); code != 0 {
		t.Fatalf("second run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for range 2 {
		if err := <-blocked; err != nil {
			t.Fatalf("a blocking action: %v", err)
		}
	}
	started := func(job string) int64 {
		b, err := os.ReadFile(filepath.Join(dir, "out", job+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("out/%s.txt: %v", job, err)
		}
		return ns
	}
	if a, leaf := started("a"), started("leaf"); a > leaf {
		t.Errorf("the long leaf started %v before the job a chain waits for", time.Duration(a-leaf))
	}
}
