package scheduler

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

var (
	restoreScale = flag.Int("restore.scale", 10, "BenchmarkRestore's size: 20,000 finished operations and 2,000 queued times this")
	restoreDir   = flag.String("restore.dir", "", "BenchmarkRestore's state directory, written if missing and kept (to compare binaries on the same state)")
)

// BenchmarkRestore measures a restart on the embedded store: opening it
// (its snapshot and logs) and Attach, until every operation is restored,
// with 200,000 finished operations in retention and 20,000 queued (a
// tenth of PERFORMANCE.md's restart of 1,000,000 and 100,000, in the same
// proportions). The state directory is written once, under the
// benchmark's temporary directory, through the store, with records as
// the scheduler writes them; most of it lies in a snapshot, as after a
// long run. Reported: the restart's time and its CPU time (ns/op is the
// wall clock). -restore.scale=50 is the restart of PERFORMANCE.md.
func BenchmarkRestore(b *testing.B) {
	finished, queued := 20_000**restoreScale, 2_000**restoreScale
	dir := *restoreDir
	if dir == "" {
		dir = filepath.Join(b.TempDir(), "state")
	}
	if _, err := os.Stat(dir); err != nil {
		writeRestoreState(b, dir, finished, queued)
	}
	b.ResetTimer()
	var cpu time.Duration
	for b.Loop() {
		c0 := cpuTime()
		store, err := statestore.OpenEmbedded(dir)
		if err != nil {
			b.Fatal(err)
		}
		s := New(Config{Retention: 3 * time.Hour}, nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		if err := s.Attach(ctx, store); err != nil {
			b.Fatal(err)
		}
		<-s.Restored()
		cpu += cpuTime() - c0
		b.StopTimer()
		if st := s.Stats(); st.Queued != queued {
			b.Fatalf("restored %d queued, want %d", st.Queued, queued)
		}
		cancel()
		<-s.Stopped()
		store.Close()
		b.StartTimer()
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
}

// writeRestoreState writes finished and queued operations' records into
// a new embedded store in dir.
func writeRestoreState(b *testing.B, dir string, finished, queued int) {
	b.Helper()
	store, err := statestore.OpenEmbeddedWith(dir, statestore.EmbeddedOptions{CompactMinBytes: 16 << 20, CompactRatio: 1})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	props := platform.Properties{{Name: "OSFamily", Value: "linux"}, {Name: "scale-pool", Value: "a"}}
	meta := EncodeMetadata(&repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: "bazel", ToolVersion: "8.1"}, ToolInvocationId: "0b4c1f6e-3d1a-4f7e-9a53-2f6c1d9e8b70", ActionMnemonic: "CppCompile", TargetId: "//src/main:lib"})
	resp, _ := proto.Marshal(&repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 0, OutputFiles: []*repb.OutputFile{{Path: "out/lib.o", Digest: &repb.Digest{Hash: action("o").Hash, SizeBytes: 1234}}}}})
	actionBytes, commandBytes := make([]byte, 140), make([]byte, 90)
	var batch []statestore.Mutation
	flush := func() {
		if err := store.Apply(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range finished + queued {
		name, id := fmt.Sprintf("op-%08d", i), fmt.Sprintf("task-%08d", i)
		d := action(name)
		inv := []string{fmt.Sprint("tenant", i%50), fmt.Sprint("inv", i%200)}
		accepted := now.Add(-time.Hour + time.Duration(i)*time.Microsecond)
		op := opRecord{Task: id, Accepted: accepted, Invocation: inv}
		// Queued first, as the scheduler writes it.
		task := taskRecord{ID: id, Instance: "main", Function: int32(d.Function), Hash: d.Hash, Size: d.Size, Platform: props,
			Action: actionBytes, Command: commandBytes, Cacheable: true, Queue: "pool-a", QueuedAt: accepted}
		state := taskStateRecord{Seq: int64(i), Invocation: inv}
		batch = append(batch, statestore.Mutation{Kind: kindTask, Key: id, Value: task.marshal()},
			statestore.Mutation{Kind: kindTaskState, Key: id, Value: state.marshal()},
			statestore.Mutation{Kind: kindOpMeta, Key: name, Value: meta},
			statestore.Mutation{Kind: kindOp, Key: name, Value: op.marshal()})
		if i < finished { // then finished: its task leaves the store
			op.Done, op.Response, op.DoneAt = true, resp, accepted.Add(time.Second)
			op.Finished = &finishedTask{Instance: "main", Function: int32(d.Function), Hash: d.Hash, Size: d.Size, Queue: "pool-a", Platform: props,
				QueuedAt: accepted, Attempts: 1, Worker: "worker-17", Invocation: inv}
			batch = append(batch, statestore.Mutation{Kind: kindTask, Key: id, Delete: true}, statestore.Mutation{Kind: kindTaskState, Key: id, Delete: true},
				statestore.Mutation{Kind: kindOp, Key: name, Value: op.marshal()})
		}
		if len(batch) >= 4000 {
			flush()
		}
	}
	flush()
	if err := store.Close(); err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshot")); err != nil {
		b.Fatalf("no snapshot written: %v", err)
	}
}
