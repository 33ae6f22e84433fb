package status

import (
	"html"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// A queued operation's page names, for each worker kept from it, the
// feasibility step that keeps it out, in that step's words: the same
// chain dispatch runs (platform, operator controls, instance, quota).
func TestWhyQueuedNamesTheRefusingStep(t *testing.T) {
	x86 := platform.Properties{{Name: "OSFamily", Value: "linux"}, {Name: "ISA", Value: "x86-64"}}
	sched := scheduler.New(scheduler.Config{
		Labels:  []scheduler.Label{{Name: "linux-x86", Properties: x86}},
		Cohorts: []scheduler.Cohort{{Name: "x86", Labels: []string{"linux-x86"}}},
	}, nil, nil)
	keys := func() []string { return nil }
	h := New(sched, execution.NewAdminService(sched, keys, execution.InMemory{}, nil, nil), blobstore.NewMemory(1<<20), nil, keys, nil, Options{})
	register := func(id string, p platform.Worker, instances ...string) {
		sched.RegisterWorker(scheduler.WorkerInfo{ID: id, Platform: p, Instances: instances, Slots: 1})
	}
	any := platform.Worker{Cores: 1, AllowUnmatched: true}
	register("w-able", any)
	register("w-platform", platform.Worker{Cores: 1})
	register("w-drained", any)
	register("w-paused", any)
	register("w-instance", any, "other")
	register("w-quota", platform.Worker{Cores: 1, AllowUnmatched: true, Properties: x86})
	if _, err := sched.ControlWorker("w-drained", func(c *scheduler.WorkerControl) { c.Drain = true }); err != nil {
		t.Fatal(err)
	}
	if _, err := sched.ControlWorker("w-paused", func(c *scheduler.WorkerControl) { c.Pause = true }); err != nil {
		t.Fatal(err)
	}
	if _, err := sched.SetQuota(scheduler.Quota{Instance: "main", Cohort: "x86", Max: 0}); err != nil {
		t.Fatal(err)
	}
	name, err := sched.Submit(scheduler.SubmitRequest{Instance: "main", ActionDigest: digest.Compute(digest.SHA256, []byte("why")),
		Platform: platform.Properties{{Name: "pool", Value: "big"}}})
	if err != nil {
		t.Fatal(err)
	}
	body := get(h, "/status/operation?name="+name).Body.String()
	unable := body[strings.Index(body, `id="why-unable"`):]
	for _, c := range []struct {
		worker string
		kind   platform.ReasonKind
		fix    string
	}{
		{"w-platform", platform.ReasonUnmatched, "pool"},
		{"w-drained", scheduler.ReasonHeld, "gantry workers undrain w-drained"},
		{"w-paused", scheduler.ReasonHeld, "gantry workers resume w-paused"},
		{"w-instance", scheduler.ReasonInstance, "--instance=main"},
		{"w-quota", scheduler.ReasonQuota, "gantry quota put"},
	} {
		row := "<td>" + c.worker + "</td><td><div>" + html.EscapeString(string(c.kind))
		i := strings.Index(unable, row)
		if i < 0 {
			t.Errorf("the page does not keep %s out by %q:\n%s", c.worker, c.kind, body)
			continue
		}
		if tr := unable[i:]; !strings.Contains(tr[:strings.Index(tr, "</tr>")], html.EscapeString(c.fix)) {
			t.Errorf("%s's reason does not say %q:\n%s", c.worker, c.fix, tr)
		}
	}
	able := body[strings.Index(body, "Workers that could run it"):strings.Index(body, `id="why-unable"`)]
	if !strings.Contains(able, "<td>w-able</td>") || strings.Count(able, "<tr><td>") != 1 {
		t.Errorf("only w-able could run it:\n%s", able)
	}
}
