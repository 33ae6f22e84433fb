package status

import (
	"fmt"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gantry-build/gantry/internal/scheduler"
)

// An operation's timeline: queued, leased, the stages its result's
// metadata reports (those it lacks left out), completed.
func TestOperationTimeline(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1_700_000_000+int64(s), 0).UTC() }
	queued := scheduler.OperationInfo{QueuedAt: at(0)}
	if got := fmt.Sprint(operationTimeline(queued)); got != fmt.Sprint([]stamp{{"queued", at(0)}}) {
		t.Errorf("queued: %s", got)
	}
	done := scheduler.OperationInfo{QueuedAt: at(0), LeasedAt: at(1), Worker: "w1", DoneAt: at(5)}
	done.Done = true
	done.Response = &repb.ExecuteResponse{Result: &repb.ActionResult{ExecutionMetadata: &repb.ExecutedActionMetadata{
		WorkerStartTimestamp: timestamppb.New(at(2)), ExecutionStartTimestamp: timestamppb.New(at(3)), WorkerCompletedTimestamp: timestamppb.New(at(4)),
	}}}
	want := []stamp{{"queued", at(0)}, {"leased to w1", at(1)}, {"worker started", at(2)}, {"execution started", at(3)}, {"worker completed", at(4)}, {"completed", at(5)}}
	if got := operationTimeline(done); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("done:\n got %v\nwant %v", got, want)
	}
}
