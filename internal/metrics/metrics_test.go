package metrics

import (
	"fmt"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
)

func TestInstancesCapFirstSeen(t *testing.T) {
	l := NewInstances(3)
	for i, want := range []string{"a", "b", "a", "c", OtherInstance, "b", OtherInstance, "c"} {
		name := []string{"a", "b", "a", "c", "d", "b", "e", "c"}[i]
		if got := l.Label(name); got != want {
			t.Errorf("Label(%q) = %q, want %q", name, got, want)
		}
	}
	def := NewInstances(0)
	for i := 0; i < DefaultMaxInstances; i++ {
		def.Label(fmt.Sprint(i))
	}
	if got := def.Label("one too many"); got != OtherInstance {
		t.Errorf("instance %d = %q, want %q", DefaultMaxInstances+1, got, OtherInstance)
	}
}

func TestResult(t *testing.T) {
	for _, c := range []struct {
		resp *repb.ExecuteResponse
		want string
	}{
		{&repb.ExecuteResponse{Result: &repb.ActionResult{}}, ResultSuccess},
		{&repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 2}}, ResultNonZeroExit},
		{&repb.ExecuteResponse{Result: &repb.ActionResult{}, CachedResult: true}, ResultCacheHit},
		{&repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 1}, Status: &rpcstatus.Status{Code: int32(codes.DeadlineExceeded)}}, ResultError},
		{&repb.ExecuteResponse{Status: &rpcstatus.Status{Code: int32(codes.Unavailable)}}, ResultError},
		{nil, ResultSuccess},
	} {
		if got := Result(c.resp); got != c.want {
			t.Errorf("Result(%v) = %s, want %s", c.resp, got, c.want)
		}
	}
}
