package execution

import (
	"context"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// seenFinished records what the service reports.
type seenFinished struct {
	Unobserved
	got []protocol.Finished
}

func (o *seenFinished) Finished(f protocol.Finished) { o.got = append(o.got, f) }

// The Execute call that reports its operation gives the report its own
// RequestMetadata, also when the state it took was read after the
// scheduler's reporter let the operation's copy go (a state without
// metadata): the build on the builds page must not lose the operation.
func TestReportKeepsTheCallersMetadata(t *testing.T) {
	obs := &seenFinished{}
	svc := New(nil, nil, nil, obs, nil)
	md := &repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: "gantry"}, ToolInvocationId: "run-1"}
	st := scheduler.OperationState{Name: "op", Done: true, Response: &repb.ExecuteResponse{}}
	svc.finishedOp(st, newCallNote(scheduler.EncodeMetadata(md), "gantry run -- true", nil))
	if len(obs.got) != 1 || obs.got[0].Metadata.GetToolInvocationId() != "run-1" || obs.got[0].BuildName != "gantry run -- true" {
		t.Fatalf("reported %+v, want the call's metadata and build name", obs.got)
	}
	// Without a note (after a restart), the stored metadata is used.
	st.Metadata = scheduler.EncodeMetadata(md)
	svc.finishedOp(st, nil)
	if len(obs.got) != 2 || obs.got[1].Metadata.GetToolInvocationId() != "run-1" {
		t.Fatalf("reported %+v without a note, want the stored metadata", obs.got)
	}
}

// An Execute call that lost the report to the scheduler waits for it to
// be done, whichever comes first; a note makes no channel until a call
// waits (one allocation for a queued operation's note).
func TestCallWaitsForTheSchedulersReport(t *testing.T) {
	var kept *callNote // escapes, as a submitted note does
	if n := testing.AllocsPerRun(100, func() { kept = newCallNote(nil, "", nil) }); n != 1 || kept == nil {
		t.Errorf("a call note takes %v allocations, want 1", n)
	}
	done := newCallNote(nil, "", nil)
	done.reportDone()
	done.waitReported(context.Background()) // returns at once

	waiting := newCallNote(nil, "", nil)
	returned := make(chan struct{})
	go func() { waiting.waitReported(context.Background()); close(returned) }()
	for waiting.reported.Load() == nil {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-returned:
		t.Fatal("the call stopped waiting before the report was done")
	case <-time.After(20 * time.Millisecond):
	}
	waiting.reportDone()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits once the report is done")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	newCallNote(nil, "", nil).waitReported(ctx) // returns: the call ended
}
