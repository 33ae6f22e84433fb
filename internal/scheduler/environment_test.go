package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

// TestEnvironmentRefusedAtSubmit: an action asking for a container image
// that no known worker declares is refused at once after the startup
// grace, with every worker's reasons and the setting that would let it
// run; before the grace, and while no worker is known, it waits like any
// other action; a worker that declares the image takes it.
func TestEnvironmentRefusedAtSubmit(t *testing.T) {
	s, clk := newQueueTest(t, nil)
	image := withPlatform("container-image=docker://x", "OSFamily=linux")

	clk.Advance(2 * time.Minute)
	submit(t, s, "no-worker-yet", image) // nobody to ask: it waits
	registerPlatform(s, "host", platform.Worker{AllowUnmatched: true, Properties: p("OSFamily=linux")})
	registerPlatform(s, "other", platform.Worker{AllowUnmatched: true, Properties: p("container-image=docker://y")})

	_, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: action("image"), Platform: p("container-image=docker://x", "OSFamily=linux")})
	var nw *NoWorkerError
	if !errors.As(err, &nw) || len(nw.Verdicts) != 2 {
		t.Fatalf("Submit = %v, want a *NoWorkerError with both workers' verdicts", err)
	}
	for _, want := range []string{"container-image=docker://x", "none of the 2 known workers", "execution environment not provided container-image", "scheduler.ignored_properties"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if st := s.Stats(); st.Queued != 1 {
		t.Errorf("queued %d, want only the action submitted before any worker was known", st.Queued)
	}

	// Ignoring the property: it is dropped before matching, and a worker
	// that does not declare it runs the action.
	s.SetIgnoredProperties([]string{platform.ContainerImage})
	if got := s.MatchedProperties(p("container-image=docker://x", "OSFamily=linux")); got.String() != "OSFamily=linux" {
		t.Errorf("MatchedProperties = %v, want OSFamily only", got)
	}
	submit(t, s, "image", image)
	a := pollNow(t, s, "host", 4)
	if a == nil || a.Task.Platform.String() != "OSFamily=linux" {
		t.Fatalf("host got %+v, want the action without its container-image", a)
	}
	s.completeOne("host", a.LeaseID, okResponse())

	// A worker that declares the image takes such actions.
	s.SetIgnoredProperties(nil)
	registerPlatform(s, "imaged", platform.Worker{Properties: p("container-image=docker://x", "OSFamily=linux")})
	submit(t, s, "image-2", image)
	for range 2 {
		b := pollNow(t, s, "imaged", 4)
		if b == nil || b.Task.Platform.String() != "OSFamily=linux,container-image=docker://x" {
			t.Fatalf("imaged got %+v, want an action asking for its image", b)
		}
	}
}

// TestEnvironmentWaitsDuringStartupGrace: before the grace ends, workers
// may still be registering again, so the action is queued.
func TestEnvironmentWaitsDuringStartupGrace(t *testing.T) {
	s, _ := newQueueTest(t, nil)
	registerPlatform(s, "host", platform.Worker{AllowUnmatched: true})
	submit(t, s, "image", withPlatform("container-image=docker://x"))
	if st := s.Stats(); st.Queued != 1 {
		t.Errorf("queued %d, want 1", st.Queued)
	}
}
