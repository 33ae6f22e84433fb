package worker

import (
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/worker/execroot"
	"github.com/gantry-build/gantry/internal/worker/runner"
)

// The peak memory reported is the cgroup's (all the action's processes
// together) when it counted more than the largest process's peak RSS.
func TestNoteUsageTakesTheCgroupPeak(t *testing.T) {
	for _, c := range []struct {
		rss, cgroup, want int64
	}{{10 << 20, 30 << 20, 30 << 20}, {10 << 20, 0, 10 << 20}, {40 << 20, 30 << 20, 40 << 20}} {
		md := &repb.ExecutedActionMetadata{}
		noteUsage(md, runner.Result{MaxRSS: c.rss}, c.cgroup, &execroot.Root{})
		u := &workerpb.ResourceUsage{}
		if len(md.AuxiliaryMetadata) != 1 || md.AuxiliaryMetadata[0].UnmarshalTo(u) != nil {
			t.Fatalf("auxiliary metadata %v, want one ResourceUsage", md.AuxiliaryMetadata)
		}
		if u.MaxRssBytes != c.want {
			t.Errorf("rss %d, cgroup peak %d: reported %d, want %d", c.rss, c.cgroup, u.MaxRssBytes, c.want)
		}
	}
}
