package server

import (
	"context"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// A learned timeout reaches the worker, which stops the run that hangs
// past it; the action then runs again with the client's timeout and
// finishes, and its message says which timeout applied. Both commands
// are one shape by the gantry-action-shape property.
func TestLearnedTimeoutStopsARunAndTheClientsTimeoutFinishesIt(t *testing.T) {
	f := startFarm(t, func(c *config.Config) {
		c.Scheduler.Durations.TimeoutMultiple = 2
		c.Scheduler.Durations.TimeoutFloor = config.Duration(time.Second)
		c.Scheduler.Durations.TimeoutMinSamples = 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shaped := func(script string) *repb.Command {
		c := shCmd(script)
		c.Platform = &repb.Platform{Properties: []*repb.Platform_Property{{Name: scheduler.ShapeProperty, Value: "flaky-test"}}}
		return c
	}
	clientTimeout := func(a *repb.Action) { a.Timeout = durationpb.New(time.Minute) }
	root := f.put(&repb.Directory{})
	if r := f.run(ctx, root, shaped("true"), clientTimeout); r.GetResult().GetExitCode() != 0 || r.GetStatus().GetCode() != 0 {
		t.Fatalf("the first run: %v", r)
	}
	start := time.Now()
	r := f.run(ctx, root, shaped("sleep 3"), clientTimeout)
	took := time.Since(start)
	if r.GetStatus().GetCode() != 0 || r.GetResult().GetExitCode() != 0 {
		t.Fatalf("the second action did not finish on its retry: %v", r)
	}
	if !strings.Contains(r.GetMessage(), "the learned timeout of 1s") || took < 4*time.Second {
		t.Errorf("after %v, message %q: want the learned 1s to have fired before the 3s run with the client's timeout", took, r.GetMessage())
	}
}
