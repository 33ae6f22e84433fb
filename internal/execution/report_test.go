package execution

import (
	"testing"

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
