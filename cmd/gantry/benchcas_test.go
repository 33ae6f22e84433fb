package main

import (
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/loadgen"
)

// TestBenchCASAgainstServer runs every gantry bench cas operation against
// a server and checks its RESULT line and that the blobs it wrote are
// stored: 2 runs and a warm-up of one 3 MiB blob each for write; one
// blob for read; 3 x 50 for batch-update; 50 for batch-read.
func TestBenchCASAgainstServer(t *testing.T) {
	var store blobstore.Store
	addr := serve(t, false, func(_ *grpc.Server, s blobstore.Store) { store = s })
	for _, c := range []struct {
		op    string
		args  []string
		blobs int // the store holds this many more after the run
	}{
		{loadgen.CASWrite, []string{"--size", "3MiB", "--chunk", "64KiB"}, 3},
		{loadgen.CASRead, []string{"--size", "3MiB"}, 1},
		{loadgen.CASBatchUpdate, []string{"--blobs", "50", "--per-call", "7", "--in-flight", "3"}, 150},
		{loadgen.CASBatchRead, []string{"--blobs", "50", "--per-call", "7", "--zstd"}, 50},
	} {
		t.Run(c.op, func(t *testing.T) {
			before, _ := store.(*blobstore.Memory).Stats()
			out, _, res, err := runBenchCommand(t, append([]string{"cas", "--server", addr, "--op", c.op, "--runs", "2"}, c.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if res["op"] != c.op || res["runs"] != "2" || res["median"] == "" || strings.HasPrefix(res["median"], "0") {
				t.Errorf("RESULT fields %v", res)
			}
			if after, _ := store.(*blobstore.Memory).Stats(); after-before != c.blobs {
				t.Errorf("the store gained %d blobs, want %d", after-before, c.blobs)
			}
		})
	}
}

func TestBenchCASFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--op", "list"},
		{"--chunk", "5MiB"},
		{"--runs", "0"},
		{"--size", "lots"},
		{"--client-window", "-1"},
	} {
		_, _, _, err := runBenchCommand(t, append([]string{"cas", "--server", "127.0.0.1:1"}, args...)...)
		if err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
