package execution

import (
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// withTimeout is the encoded Action action with its timeout set to d,
// the learned timeout the scheduler gave this run (d == 0: action as it
// is). The worker enforces the Action's timeout, so this is the whole of
// telling it; the action digest stays the client's (results and cache
// entries go under the lease's digest, never one computed by a worker).
// An Action that does not decode is passed on as it is, for the worker
// to fail with its own error.
func withTimeout(action []byte, d time.Duration) []byte {
	if d <= 0 || len(action) == 0 {
		return action
	}
	a := &repb.Action{}
	if proto.Unmarshal(action, a) != nil {
		return action
	}
	a.Timeout = durationpb.New(d)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	if err != nil {
		return action
	}
	return b
}
