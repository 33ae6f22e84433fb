package platform

import (
	"reflect"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// props builds sorted properties from name=value strings.
func props(kv ...string) Properties {
	out := make(Properties, 0, len(kv))
	for _, s := range kv {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			panic("props: " + s + " is not name=value")
		}
		out = append(out, Property{Name: k, Value: v})
	}
	out.Sort()
	return out
}

// brief is the part of a Reason the tables compare.
type brief struct {
	Kind     ReasonKind
	Property string
	Want     string
}

func briefs(rs []Reason) []brief {
	var out []brief
	for _, r := range rs {
		out = append(out, brief{r.Kind, r.Property, r.Want})
	}
	return out
}

func TestQueueEligible(t *testing.T) {
	gpu := Queue{Name: "gpu", Properties: props("gpu=1")}
	gpuLoose := Queue{Name: "gpu", AllowUnmatched: true, Properties: props("gpu=1")}
	cpu := Queue{Name: "cpu", AllowUnmatched: true, Properties: props("min-cores=*", "max-cores=*")}
	twoGPUs := Queue{Name: "gpus", Properties: props("gpu=1", "gpu=2")}
	anyGPU := Queue{Name: "anygpu", Properties: props("gpu=*")}
	empty := Queue{Name: "strict-empty"}
	for _, tc := range []struct {
		name    string
		q       Queue
		action  Properties
		reasons []brief // nil: eligible
	}{
		{"exact match", gpu, props("gpu=1"), nil},
		{"wildcard accepts any value", cpu, props("min-cores=7", "max-cores=9"), nil},
		{"wildcard still needs the property", cpu, props("min-cores=2"), []brief{{ReasonMissing, "max-cores", ""}}},
		{"missing property", gpu, nil, []brief{{ReasonMissing, "gpu", ""}}},
		{"missing properties each named", cpu, props("OSFamily=linux"), []brief{{ReasonMissing, "max-cores", ""}, {ReasonMissing, "min-cores", ""}}},
		{"value mismatch", gpu, props("gpu=2"), []brief{{ReasonMismatch, "gpu", "2"}}},
		{"value is case sensitive", gpu, props("gpu=1 "), []brief{{ReasonMismatch, "gpu", "1 "}}},
		{"unmatched property without allow_unmatched", gpu, props("gpu=1", "OSFamily=linux"), []brief{{ReasonUnmatched, "OSFamily", "linux"}}},
		{"unmatched property with allow_unmatched", gpuLoose, props("gpu=1", "OSFamily=linux"), nil},
		{"unmatched special property is still unmatched", gpu, props("gpu=1", "min-cores=2"), []brief{{ReasonUnmatched, "min-cores", "2"}}},
		{"mismatch and unmatched together", gpu, props("gpu=3", "ISA=arm64"), []brief{{ReasonMismatch, "gpu", "3"}, {ReasonUnmatched, "ISA", "arm64"}}},
		{"queue with no properties takes an empty platform", empty, nil, nil},
		{"queue with no properties and no allow_unmatched refuses labels", empty, props("a=b"), []brief{{ReasonUnmatched, "a", "b"}}},
		// Multi-valued on the queue side: any of the queue's values.
		{"queue multi-valued, first value", twoGPUs, props("gpu=1"), nil},
		{"queue multi-valued, second value", twoGPUs, props("gpu=2"), nil},
		{"queue multi-valued, other value", twoGPUs, props("gpu=3"), []brief{{ReasonMismatch, "gpu", "3"}}},
		// Multi-valued on the action side: every value must be accepted.
		{"action multi-valued, all accepted", twoGPUs, props("gpu=1", "gpu=2"), nil},
		{"action multi-valued, one refused", gpu, props("gpu=1", "gpu=2"), []brief{{ReasonMismatch, "gpu", "2"}}},
		{"action multi-valued, both refused", gpu, props("gpu=2", "gpu=3"), []brief{{ReasonMismatch, "gpu", "2"}, {ReasonMismatch, "gpu", "3"}}},
		{"action multi-valued against wildcard", anyGPU, props("gpu=1", "gpu=9"), nil},
		{"action multi-valued unmatched reports all values", empty, props("a=1", "a=2"), []brief{{ReasonUnmatched, "a", "1,2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, reasons := tc.q.Eligible(tc.action)
			if ok != (tc.reasons == nil) {
				t.Fatalf("Eligible = %v, reasons %v", ok, reasons)
			}
			if got := briefs(reasons); !reflect.DeepEqual(got, tc.reasons) {
				t.Fatalf("reasons = %+v, want %+v", got, tc.reasons)
			}
			for _, r := range reasons {
				if r.Fix == "" {
					t.Errorf("reason %v says nothing about what would make the queue eligible", r)
				}
			}
		})
	}
}

// TestReasonSaysWhatWouldMakeItEligible checks the text of each kind of
// reason names the property and a concrete fix.
func TestReasonSaysWhatWouldMakeItEligible(t *testing.T) {
	gpu := Queue{Name: "gpu", Properties: props("gpu=*", "gpu=1")}
	for _, tc := range []struct {
		name   string
		q      Queue
		action Properties
		want   []string
	}{
		{"missing", gpu, nil, []string{"missing property gpu", "required: *,1", "add gpu=1 to the action's platform", "exec_properties"}},
		{"missing with only a wildcard", Queue{Name: "q", Properties: props("pool=*")}, nil, []string{"missing property pool", "add pool=<any value>"}},
		{"mismatch", Queue{Name: "gpu", Properties: props("gpu=1")}, props("gpu=2"), []string{"value mismatch gpu", "action: 2, offered: 1", "use gpu=1", `add "2" to the queue's values`}},
		{"unmatched", gpu, props("gpu=1", "OSFamily=linux"), []string{"unmatched property OSFamily", "action: linux", "remove OSFamily from the action", `set allow_unmatched on queue "gpu"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, reasons := tc.q.Eligible(tc.action)
			if ok || len(reasons) != 1 {
				t.Fatalf("Eligible = %v, %v; want one reason", ok, reasons)
			}
			s := reasons[0].String()
			for _, w := range tc.want {
				if !strings.Contains(s, w) {
					t.Errorf("%q does not contain %q", s, w)
				}
			}
		})
	}
}

func TestSelectQueue(t *testing.T) {
	cpu := Queue{Name: "cpu", AllowUnmatched: true, Properties: props("min-cores=*", "max-cores=*")}
	gpu := Queue{Name: "gpu", AllowUnmatched: true, Properties: props("gpu=1")}
	catchAll := Queue{Name: "rest", AllowUnmatched: true}
	for _, tc := range []struct {
		name     string
		queues   []Queue
		action   Properties
		chosen   string // "" for none
		eligible []string
	}{
		{"none configured uses the default queue", nil, props("anything=at-all", "gpu=7"), "default", []string{"default"}},
		{"empty list uses the default queue", []Queue{}, nil, "default", []string{"default"}},
		{"gpu action skips cpu", []Queue{cpu, gpu}, props("gpu=1"), "gpu", []string{"gpu"}},
		{"first eligible queue wins", []Queue{cpu, gpu, catchAll}, props("gpu=1", "min-cores=1", "max-cores=2"), "cpu", []string{"cpu", "gpu", "rest"}},
		{"order matters", []Queue{catchAll, gpu}, props("gpu=1"), "rest", []string{"rest", "gpu"}},
		{"falls through to a catch-all", []Queue{cpu, gpu, catchAll}, props("OSFamily=linux"), "rest", []string{"rest"}},
		{"nothing eligible", []Queue{cpu, gpu}, props("gpu=2"), "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := SelectQueue(tc.queues, tc.action)
			wantVerdicts := len(tc.queues)
			if wantVerdicts == 0 {
				wantVerdicts = 1
			}
			if len(a.Verdicts) != wantVerdicts {
				t.Fatalf("%d verdicts, want one per queue (%d)", len(a.Verdicts), wantVerdicts)
			}
			got := ""
			if a.Chosen >= 0 {
				got = a.Verdicts[a.Chosen].Queue
			}
			if got != tc.chosen {
				t.Fatalf("chosen %q, want %q\n%s", got, tc.chosen, a)
			}
			var eligible []string
			for _, v := range a.Verdicts {
				if v.Eligible {
					eligible = append(eligible, v.Queue)
					if len(v.Reasons) != 0 {
						t.Errorf("eligible queue %s has reasons %v", v.Queue, v.Reasons)
					}
				} else if len(v.Reasons) == 0 {
					t.Errorf("queue %s not eligible but gives no reason", v.Queue)
				}
			}
			// Compare as sets: the order of eligible queues is the config order.
			if !sameSet(eligible, tc.eligible) {
				t.Fatalf("eligible %v, want %v", eligible, tc.eligible)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return true
}

func TestAnalysisText(t *testing.T) {
	cpu := Queue{Name: "cpu", AllowUnmatched: true, Properties: props("min-cores=*", "max-cores=*")}
	gpu := Queue{Name: "gpu", AllowUnmatched: true, Properties: props("gpu=1")}
	rest := Queue{Name: "rest", AllowUnmatched: true}

	none := SelectQueue([]Queue{cpu, gpu}, props("gpu=2"))
	s := none.String()
	for _, want := range []string{
		`queue "cpu": not eligible`, "missing property max-cores", "missing property min-cores", "add min-cores=<any value>",
		`queue "gpu": not eligible`, "value mismatch gpu (action: 2, offered: 1)", "use gpu=1",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
	sum := none.Summary()
	if strings.Contains(sum, "\n") || !strings.Contains(sum, `queue "cpu": missing property max-cores`) || !strings.Contains(sum, `queue "gpu": value mismatch gpu`) {
		t.Errorf("Summary() = %q", sum)
	}

	some := SelectQueue([]Queue{gpu, rest, cpu}, props("gpu=1"))
	s = some.String()
	for _, want := range []string{`queue "gpu": eligible (chosen)`, `queue "rest": eligible (an earlier queue was chosen)`, `queue "cpu": not eligible`} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
}

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		props Properties
		want  Request // Properties is filled in by the test
		err   string  // substring; "" means valid
	}{
		{"empty holds one core", nil, Request{Cores: 1}, ""},
		{"labels only", props("OSFamily=linux"), Request{Cores: 1}, ""},
		{"min-cores", props("min-cores=4"), Request{Cores: 4}, ""},
		{"min-cores zero", props("min-cores=0"), Request{}, `min-cores="0" must be a positive integer`},
		{"min-cores negative", props("min-cores=-2"), Request{}, "min-cores"},
		{"min-cores not a number", props("min-cores=four"), Request{}, "min-cores"},
		{"min-cores fractional", props("min-cores=1.5"), Request{}, "min-cores"},
		{"min-cores empty", props("min-cores="), Request{}, "min-cores"},
		{"min-cores twice", props("min-cores=1", "min-cores=2"), Request{}, "min-cores is given 2 times"},
		{"max-cores alone", props("max-cores=8"), Request{Cores: 1, MaxCores: 8}, ""},
		{"max-cores equal to min-cores", props("min-cores=4", "max-cores=4"), Request{Cores: 4, MaxCores: 4}, ""},
		{"max-cores above min-cores", props("min-cores=2", "max-cores=16"), Request{Cores: 2, MaxCores: 16}, ""},
		{"max-cores below min-cores", props("min-cores=4", "max-cores=2"), Request{}, "max-cores=2 is less than min-cores=4"},
		{"max-cores zero", props("max-cores=0"), Request{}, "max-cores"},
		{"max-cores not a number", props("max-cores=lots"), Request{}, "max-cores"},
		{"min-mem", props("min-mem=1073741824"), Request{Cores: 1, MinMem: 1 << 30}, ""},
		{"min-mem zero", props("min-mem=0"), Request{}, "min-mem"},
		{"min-mem with a unit", props("min-mem=1GiB"), Request{}, "min-mem"},
		{"min-mem negative", props("min-mem=-1"), Request{}, "min-mem"},
		{"resource", props("resource:gpu=1"), Request{Cores: 1, Resources: map[string]int64{"gpu": 1}}, ""},
		{"two resources", props("resource:gpu=2", "resource:license=1"), Request{Cores: 1, Resources: map[string]int64{"gpu": 2, "license": 1}}, ""},
		{"resource zero", props("resource:gpu=0"), Request{}, "resource:gpu"},
		{"resource negative", props("resource:gpu=-1"), Request{}, "resource:gpu"},
		{"resource not a number", props("resource:gpu=yes"), Request{}, "resource:gpu"},
		{"resource without a name", props("resource:=1"), Request{}, "must name a resource"},
		{"Worker pin", props("Worker=w7"), Request{Cores: 1, Pin: "w7"}, ""},
		{"Worker twice", props("Worker=w1", "Worker=w2"), Request{}, "Worker is given 2 times"},
		{"process wrappers", props("process-wrapper=nice", "process-wrapper=strace"), Request{Cores: 1, Wrappers: []string{"nice", "strace"}}, ""},
		{"everything", props("min-cores=2", "max-cores=4", "min-mem=100", "resource:gpu=1", "Worker=w", "process-wrapper=nice", "gpu=1"),
			Request{Cores: 2, MaxCores: 4, MinMem: 100, Resources: map[string]int64{"gpu": 1}, Pin: "w", Wrappers: []string{"nice"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRequest(tc.props)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Properties = tc.props
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseRequest = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func mustParse(t *testing.T, kv ...string) Request {
	t.Helper()
	r, err := ParseRequest(props(kv...))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestWorkerAccepts(t *testing.T) {
	base := Worker{
		Name: "w1", Cores: 8, MemoryBytes: 16 << 30,
		Properties: props("OSFamily=linux", "ISA=x86-64", "ISA=arm64", "pool=*"),
		Resources:  map[string]int64{"gpu": 2},
		Wrappers:   []string{"nice", "sandbox"},
	}
	loose := base
	loose.AllowUnmatched = true
	withImage, anyImage := loose, loose
	withImage.Properties = props("OSFamily=linux", "container-image=docker://x")
	anyImage.Properties = props("container-image=*")
	free := func(cores int, res map[string]int64) *Free { return &Free{Cores: cores, Resources: res} }
	for _, tc := range []struct {
		name    string
		w       Worker
		action  []string
		free    *Free
		reasons []brief // nil: accepted
	}{
		{"nothing asked", base, nil, nil, nil},
		{"matching labels", base, []string{"OSFamily=linux", "ISA=arm64"}, nil, nil},
		// min-cores against totals (free nil) and against free cores.
		{"min-cores within total", base, []string{"min-cores=8"}, nil, nil},
		{"min-cores above total", base, []string{"min-cores=9"}, nil, []brief{{ReasonResource, MinCores, "9"}}},
		{"min-cores within free", base, []string{"min-cores=3"}, free(3, nil), nil},
		{"min-cores above free", base, []string{"min-cores=4"}, free(3, nil), []brief{{ReasonResource, MinCores, "4"}}},
		{"one core needs one free", base, nil, free(0, nil), []brief{{ReasonResource, MinCores, "1"}}},
		{"negative free counts as none", base, nil, free(-3, nil), []brief{{ReasonResource, MinCores, "1"}}},
		{"max-cores is not a limit", base, []string{"max-cores=64"}, nil, nil},
		// min-mem against memory.
		{"min-mem equal to memory", base, []string{"min-mem=17179869184"}, nil, nil},
		{"min-mem above memory", base, []string{"min-mem=17179869185"}, nil, []brief{{ReasonResource, MinMem, "17179869185"}}},
		// Declared properties: a listed value or "*".
		{"declared value", base, []string{"OSFamily=linux"}, nil, nil},
		{"declared value mismatch", base, []string{"OSFamily=windows"}, nil, []brief{{ReasonMismatch, "OSFamily", "windows"}}},
		{"one of several declared values", base, []string{"ISA=x86-64"}, nil, nil},
		{"declared wildcard", base, []string{"pool=anything"}, nil, nil},
		{"declared wildcard not needed", base, []string{"OSFamily=linux"}, nil, nil},
		{"mismatch even with allow unmatched", loose, []string{"OSFamily=darwin"}, nil, []brief{{ReasonMismatch, "OSFamily", "darwin"}}},
		{"action multi-valued all offered", base, []string{"ISA=x86-64", "ISA=arm64"}, nil, nil},
		{"action multi-valued one not offered", base, []string{"ISA=x86-64", "ISA=riscv64"}, nil, []brief{{ReasonMismatch, "ISA", "riscv64"}}},
		// Undeclared properties.
		{"undeclared without allow unmatched", base, []string{"gpu=1"}, nil, []brief{{ReasonUnmatched, "gpu", "1"}}},
		{"undeclared with allow unmatched", loose, []string{"gpu=1"}, nil, nil},
		// Execution environments: only a worker declaring them takes them.
		{"container image undeclared", base, []string{"container-image=docker://x"}, nil, []brief{{ReasonEnvironment, ContainerImage, "docker://x"}}},
		{"container image undeclared even with allow unmatched", loose, []string{"container-image=docker://x"}, nil, []brief{{ReasonEnvironment, ContainerImage, "docker://x"}}},
		{"docker setting undeclared even with allow unmatched", loose, []string{"dockerPrivileged=true"}, nil, []brief{{ReasonEnvironment, "dockerPrivileged", "true"}}},
		{"container image declared", withImage, []string{"container-image=docker://x"}, nil, nil},
		{"container image declared as any", anyImage, []string{"container-image=docker://y"}, nil, nil},
		{"container image declared with another value", withImage, []string{"container-image=docker://y"}, nil, []brief{{ReasonMismatch, ContainerImage, "docker://y"}}},
		{"dockerNetwork is a sandbox request", base, []string{"dockerNetwork=off"}, nil, nil},
		{"special keys are not labels", base, []string{"min-cores=1", "max-cores=2", "min-mem=1", "resource:gpu=1", "Worker=w1", "process-wrapper=nice"}, nil, nil},
		// resource:NAME against total and free capacity.
		{"resource within total", base, []string{"resource:gpu=2"}, nil, nil},
		{"resource above total", base, []string{"resource:gpu=3"}, nil, []brief{{ReasonResource, "resource:gpu", "3"}}},
		{"resource the worker lacks", base, []string{"resource:tpu=1"}, nil, []brief{{ReasonResource, "resource:tpu", "1"}}},
		{"resource within free", base, []string{"resource:gpu=1"}, free(8, map[string]int64{"gpu": 1}), nil},
		{"resource above free", base, []string{"resource:gpu=2"}, free(8, map[string]int64{"gpu": 1}), []brief{{ReasonResource, "resource:gpu", "2"}}},
		{"resource none free", base, []string{"resource:gpu=1"}, free(8, nil), []brief{{ReasonResource, "resource:gpu", "1"}}},
		// Worker pin.
		{"pinned here", base, []string{"Worker=w1"}, nil, nil},
		{"pinned elsewhere", base, []string{"Worker=w2"}, nil, []brief{{ReasonPinned, WorkerName, "w2"}}},
		{"pin is exact", base, []string{"Worker=W1"}, nil, []brief{{ReasonPinned, WorkerName, "W1"}}},
		// Process wrappers.
		{"known wrapper", base, []string{"process-wrapper=nice"}, nil, nil},
		{"two known wrappers", base, []string{"process-wrapper=nice", "process-wrapper=sandbox"}, nil, nil},
		{"unknown wrapper", base, []string{"process-wrapper=strace"}, nil, []brief{{ReasonWrapper, ProcessWrapper, "strace"}}},
		{"unknown wrapper even with allow unmatched", loose, []string{"process-wrapper=strace"}, nil, []brief{{ReasonWrapper, ProcessWrapper, "strace"}}},
		// Every reason, in order.
		{"all reasons", base, []string{"Worker=w9", "min-cores=99", "min-mem=99999999999999", "resource:gpu=5", "process-wrapper=x", "OSFamily=windows", "zone=a"}, nil,
			[]brief{
				{ReasonPinned, WorkerName, "w9"}, {ReasonResource, MinCores, "99"}, {ReasonResource, MinMem, "99999999999999"},
				{ReasonResource, "resource:gpu", "5"}, {ReasonWrapper, ProcessWrapper, "x"},
				{ReasonMismatch, "OSFamily", "windows"}, {ReasonUnmatched, "zone", "a"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustParse(t, tc.action...)
			got := briefs(tc.w.Accepts(r, tc.free))
			if !reflect.DeepEqual(got, tc.reasons) {
				t.Fatalf("Accepts = %+v, want %+v", got, tc.reasons)
			}
		})
	}
}

func TestWorkerReasonText(t *testing.T) {
	w := Worker{Name: "w1", Cores: 4, MemoryBytes: 1000, Resources: map[string]int64{"gpu": 2}, Wrappers: []string{"nice"}, Properties: props("OSFamily=linux")}
	for _, tc := range []struct {
		action []string
		free   *Free
		want   []string
	}{
		{[]string{"Worker=w2"}, nil, []string{"pinned elsewhere Worker", "action: w2, offered: w1", `start a worker named "w2"`}},
		{[]string{"min-cores=6"}, nil, []string{"insufficient capacity min-cores", "action: 6, offered: 4", "ask for at most 4 cores"}},
		{[]string{"min-cores=3"}, &Free{Cores: 2}, []string{"action: 3, offered: 2", "ask for at most 4 cores"}},
		{[]string{"min-mem=2000"}, nil, []string{"insufficient capacity min-mem", "action: 2000, offered: 1000", "ask for less memory"}},
		{[]string{"resource:gpu=3"}, nil, []string{"insufficient capacity resource:gpu", "action: 3, offered: 2", "has 2 gpu in total"}},
		{[]string{"resource:gpu=2"}, &Free{Cores: 4, Resources: map[string]int64{"gpu": 1}}, []string{"action: 2, offered: 1", "has 2 gpu in total"}},
		{[]string{"process-wrapper=strace"}, nil, []string{"unknown process wrapper process-wrapper", "action: strace, offered: nice", `process wrapper named "strace"`}},
		{[]string{"OSFamily=windows"}, nil, []string{"value mismatch OSFamily", "action: windows, offered: linux", "use OSFamily=linux"}},
		{[]string{"gpu=1"}, nil, []string{"unmatched property gpu", "declare gpu on the worker", "accept unmatched"}},
		{[]string{"container-image=docker://x"}, nil, []string{"execution environment not provided container-image", "action: docker://x", "worker property container-image=docker://x", "list container-image in scheduler.ignored_properties"}},
	} {
		t.Run(strings.Join(tc.action, ","), func(t *testing.T) {
			rs := w.Accepts(mustParse(t, tc.action...), tc.free)
			if len(rs) != 1 {
				t.Fatalf("reasons %v, want one", rs)
			}
			s := rs[0].String()
			for _, want := range tc.want {
				if !strings.Contains(s, want) {
					t.Errorf("%q does not contain %q", s, want)
				}
			}
		})
	}
}

func TestWorkerServes(t *testing.T) {
	for _, tc := range []struct {
		queues []string
		queue  string
		want   bool
	}{
		{nil, "default", true},
		{nil, "gpu", true},
		{[]string{"gpu"}, "gpu", true},
		{[]string{"gpu"}, "cpu", false},
		{[]string{"gpu"}, "default", false},
		{[]string{"cpu", "gpu"}, "cpu", true},
	} {
		if got := (Worker{Queues: tc.queues}).Serves(tc.queue); got != tc.want {
			t.Errorf("worker serving %v: Serves(%q) = %v, want %v", tc.queues, tc.queue, got, tc.want)
		}
	}
}

func TestIsSpecial(t *testing.T) {
	for name, want := range map[string]bool{
		"min-cores": true, "max-cores": true, "min-mem": true, "Worker": true, "process-wrapper": true,
		"resource:gpu": true, "resource:": true,
		"OSFamily": false, "gpu": false, "worker": false, "Min-Cores": false, "resources:gpu": false,
	} {
		if got := IsSpecial(name); got != want {
			t.Errorf("IsSpecial(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestIsEnvironment(t *testing.T) {
	for name, want := range map[string]bool{
		"container-image": true, "dockerPrivileged": true, "dockerRuntime": true, "dockerUser": true,
		"dockerNetwork": false, "OSFamily": false, "ISA": false, "pool": false, "network": false, "Container-Image": false, "image": false,
	} {
		if got := IsEnvironment(name); got != want {
			t.Errorf("IsEnvironment(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestWithout(t *testing.T) {
	ps := props("ISA=x86-64", "container-image=docker://x", "pool=a", "pool=b")
	if got := ps.Without([]string{"container-image", "pool"}); !reflect.DeepEqual(got, props("ISA=x86-64")) {
		t.Errorf("Without = %v, want ISA only", got)
	}
	if got := ps.Without([]string{"zone"}); !reflect.DeepEqual(got, ps) {
		t.Errorf("Without of an absent name = %v, want %v", got, ps)
	}
	if got := ps.Without(nil); !reflect.DeepEqual(got, ps) {
		t.Errorf("Without(nil) = %v", got)
	}
	if !reflect.DeepEqual(ps, props("ISA=x86-64", "container-image=docker://x", "pool=a", "pool=b")) {
		t.Errorf("Without changed its receiver: %v", ps)
	}
}

func TestPropertiesHelpers(t *testing.T) {
	p := FromProto(&repb.Platform{Properties: []*repb.Platform_Property{
		{Name: "b", Value: "2"}, {Name: "a", Value: "z"}, {Name: "b", Value: "1"},
	}})
	want := Properties{{"a", "z"}, {"b", "1"}, {"b", "2"}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("FromProto = %v, want %v (sorted by name, then value)", p, want)
	}
	if FromProto(nil) != nil {
		t.Error("FromProto(nil) should be nil")
	}
	if got := p.String(); got != "a=z,b=1,b=2" {
		t.Errorf("String = %q", got)
	}
	if got := p.Values("b"); !reflect.DeepEqual(got, []string{"1", "2"}) {
		t.Errorf("Values(b) = %v", got)
	}
	if got := p.Values("c"); got != nil {
		t.Errorf("Values(c) = %v", got)
	}
	// Key tells platforms apart, including ones that would print alike.
	keys := map[string]Properties{}
	for _, ps := range []Properties{
		nil,
		props("a=1"),
		props("a=1", "a=2"),
		props("a=1,a=2"),
		props("a=1", "b=2"),
		props("a=1,b=2"),
	} {
		k := ps.Key()
		if prev, dup := keys[k]; dup {
			t.Errorf("%v and %v have the same key", prev, ps)
		}
		keys[k] = ps
	}
	if props("b=1", "a=2").Key() != props("a=2", "b=1").Key() {
		t.Error("Key depends on the order given")
	}
}
