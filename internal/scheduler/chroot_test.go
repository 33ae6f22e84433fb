package scheduler

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/platform"
)

// The actions of a chroot instance go only to a worker that offers the
// chroot wrapper, however willing the others are; those of other
// instances are left alone; an action no chroot worker can take fails
// with the no-match analysis saying which worker setting would.
func TestChrootInstanceActionsReachOnlyChrootWorkers(t *testing.T) {
	s, clk := newQueueTest(t, func(c *Config) { c.ChrootInstances = []string{"bst"}; c.StartupGrace = 0 })
	registerPlatform(s, "host", platform.Worker{Properties: p("OSFamily=linux"), AllowUnmatched: true, Wrappers: []string{"bubblewrap"}})
	if !s.RunsInChroot("bst") || s.RunsInChroot("") {
		t.Fatal("RunsInChroot does not follow ChrootInstances")
	}
	inBst := func(r *SubmitRequest) { r.Instance = "bst" }
	op := submit(t, s, "sysroot", inBst, withPlatform("OSFamily=linux"))
	submit(t, s, "bazel", withPlatform("OSFamily=linux"))
	a := pollNow(t, s, "host", 4)
	if a == nil || a.Task.ActionDigest != action("bazel") {
		t.Fatalf("the host worker got %+v, want the other instance's action", a)
	}
	s.completeOne("host", a.LeaseID, okResponse())
	if a := pollNow(t, s, "host", 4); a != nil {
		t.Fatalf("the host worker got the chroot instance's action %v (platform %v)", a.Task.ActionDigest, a.Task.Platform)
	}
	clk.Advance(11 * time.Minute)
	keepAlive(t, s, "host")
	s.Tick()
	st := state(t, s, op)
	if !st.Done || codes.Code(st.Response.GetStatus().GetCode()) != codes.FailedPrecondition {
		t.Fatalf("the unrunnable chroot action: done %v, status %v; want FAILED_PRECONDITION", st.Done, st.Response.GetStatus())
	}
	if msg := st.Response.GetStatus().GetMessage(); !strings.Contains(msg, "process-wrapper=chroot") || !strings.Contains(msg, "worker.sandbox.mode chroot") {
		t.Errorf("message %q does not say the action needs a chroot worker", msg)
	}

	// A chroot worker takes the next one, whose task keeps the requirement.
	registerPlatform(s, "chroot", platform.Worker{Properties: p("OSFamily=linux"), Wrappers: []string{platform.ChrootWrapper}})
	submit(t, s, "sysroot2", inBst, withPlatform("OSFamily=linux"))
	if a := pollNow(t, s, "host", 4); a != nil {
		t.Fatalf("the host worker got %v", a.Task.ActionDigest)
	}
	a = pollNow(t, s, "chroot", 4)
	if a == nil || a.Task.ActionDigest != action("sysroot2") {
		t.Fatalf("the chroot worker got %+v", a)
	}
	if got := a.Task.Platform.String(); got != "OSFamily=linux,process-wrapper=chroot" {
		t.Errorf("the task's platform is %s", got)
	}
}
