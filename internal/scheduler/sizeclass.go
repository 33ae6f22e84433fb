package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/platform"
)

// SizeClassProperty is the platform property that names a worker's size
// class. A worker may declare it (a label); otherwise the scheduler sets
// it from the worker's cores and memory when it registers. The scheduler
// adds it to every action it places, so the class is part of the
// action's bucket: a queued action for the large class never stands in
// front of a small worker's work (a bucket offers only its head task).
// An action that states it itself runs on that class, without fallback.
const SizeClassProperty = "gantry-size-class"

// sizeHistoryPrefix marks the history's records of size classes, apart
// from the cohorts recorded before (and while size classes are off).
const sizeHistoryPrefix = "size:"

// SizeClass is one class of workers. A worker that does not name its
// class is in the largest class whose Cores and Memory it has.
type SizeClass struct {
	Name   string
	Cores  int
	Memory int64
}

// SizeClassOptions tune the choice of a class.
type SizeClassOptions struct {
	// MaxSlowdown: an action runs on the smallest class whose expected
	// wall time is at most MaxSlowdown times the largest class's.
	MaxSlowdown float64
	// Exploration is the share of runs with history that go to a smaller
	// class than the one chosen, to learn its time.
	Exploration float64
	// LearnedResources fills min-cores and min-mem from the history when
	// an action states neither.
	LearnedResources bool
}

// DefaultMaxSlowdown and DefaultExploration are the defaults of
// scheduler.size_classes.max_slowdown and exploration.
const (
	DefaultMaxSlowdown = 1.5
	DefaultExploration = 0.05
)

// SizeClasses choose the class of worker an action runs on from its
// shape's history, as Buildbarn's feedback-driven analyzer does: the
// smallest class that is not much slower than the largest, a larger one
// after a failure there, and now and then a smaller one to learn.
type SizeClasses struct {
	classes []SizeClass // smallest first
	opts    SizeClassOptions

	mu  sync.Mutex
	rng *rand.Rand
}

// NewSizeClasses checks classes (smallest first: neither cores nor
// memory may fall from one to the next) and opts. rng draws the
// exploration; nil seeds one from the time.
func NewSizeClasses(classes []SizeClass, opts SizeClassOptions, rng *rand.Rand) (*SizeClasses, error) {
	if len(classes) == 0 {
		return nil, fmt.Errorf("size classes need at least one class")
	}
	seen := map[string]bool{}
	for i, c := range classes {
		switch {
		case c.Name == "" || strings.ContainsAny(c.Name, " \t\n=,"):
			return nil, fmt.Errorf("size class %d: name %q must be a non-empty word (e.g. small)", i, c.Name)
		case seen[c.Name]:
			return nil, fmt.Errorf("size class %q is defined twice", c.Name)
		case c.Cores < 0 || c.Memory < 0:
			return nil, fmt.Errorf("size class %q: cores and memory must not be negative", c.Name)
		case i > 0 && (c.Cores < classes[i-1].Cores || c.Memory < classes[i-1].Memory):
			return nil, fmt.Errorf("size class %q is smaller than %q before it; list the classes smallest first", c.Name, classes[i-1].Name)
		}
		seen[c.Name] = true
	}
	if opts.MaxSlowdown < 1 {
		return nil, fmt.Errorf("size classes: max_slowdown is %v; use at least 1 (1.5: a small class may take half as long again)", opts.MaxSlowdown)
	}
	if opts.Exploration < 0 || opts.Exploration >= 1 {
		return nil, fmt.Errorf("size classes: exploration is %v; use a share from 0 to below 1 (0.05: one run in twenty)", opts.Exploration)
	}
	if rng == nil {
		seed := uint64(time.Now().UnixNano())
		rng = rand.New(rand.NewPCG(seed, seed>>1|1))
	}
	return &SizeClasses{classes: append([]SizeClass(nil), classes...), opts: opts, rng: rng}, nil
}

// Classes returns the classes, smallest first.
func (sc *SizeClasses) Classes() []SizeClass { return append([]SizeClass(nil), sc.classes...) }

// index is the position of class name, -1 for none.
func (sc *SizeClasses) index(name string) int {
	for i, c := range sc.classes {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// names lists the classes for messages.
func (sc *SizeClasses) names() string {
	ns := make([]string, len(sc.classes))
	for i, c := range sc.classes {
		ns[i] = c.Name
	}
	return strings.Join(ns, ", ")
}

// classOf is the class of a worker offering p: the one it names with
// SizeClassProperty, else the largest whose cores and memory it has
// (the smallest when it has less than every class). unknown is a name
// it gave that is no class.
func (sc *SizeClasses) classOf(p platform.Worker) (idx int, unknown string) {
	if vs := p.Properties.Values(SizeClassProperty); len(vs) > 0 {
		if i := sc.index(vs[0]); i >= 0 {
			return i, ""
		}
		unknown = vs[0]
	}
	for i := len(sc.classes) - 1; i > 0; i-- {
		c := sc.classes[i]
		if p.Cores >= c.Cores && p.MemoryBytes >= c.Memory {
			return i, unknown
		}
	}
	return 0, unknown
}

// classView is what the choice needs of a shape's history on one class.
type classView struct {
	// weight is the decayed number of successful runs; wall their mean
	// seconds, cpu their mean CPU seconds, memory their mean peak bytes.
	weight, wall, cpu, memory float64
	// exit is the last successful run's exit code; failed: the last run
	// failed (or timed out) here and none succeeded since.
	exit   int32
	failed bool
}

// views reads a shape's history per class, indexed like sc.classes.
func (sc *SizeClasses) views(stats map[string]ClassStats) []classView {
	vs := make([]classView, len(sc.classes))
	for i, c := range sc.classes {
		st, ok := stats[sizeHistoryPrefix+c.Name]
		if !ok {
			continue
		}
		vs[i] = classView{weight: st.Weight, wall: st.Wall, cpu: st.CPU, memory: st.Memory, exit: st.ExitCode, failed: st.FailedAt.After(st.At)}
	}
	return vs
}

// choose picks the class for a run of a shape with history vs among the
// classes that have workers (live; nil: all): the largest for a shape
// it never ran; else the smallest above any that failed whose expected
// time is within MaxSlowdown of the largest's and whose memory holds the
// shape's peak. With probability Exploration it then picks a smaller
// class at random instead (explored).
func (sc *SizeClasses) choose(vs []classView, live []bool, explore bool) (idx int, explored bool) {
	has := func(i int) bool { return live == nil || live[i] }
	largest := len(sc.classes) - 1
	for largest > 0 && !has(largest) {
		largest--
	}
	top := vs[largest]
	if top.weight == 0 {
		return largest, false
	}
	floor := 0
	for i := largest - 1; i >= 0; i-- {
		if vs[i].failed {
			floor = i + 1
			break
		}
	}
	fits := func(i int) bool {
		return has(i) && (sc.classes[i].Memory == 0 || top.memory <= float64(sc.classes[i].Memory))
	}
	idx = largest
	for i := floor; i < largest; i++ {
		if fits(i) && vs[i].weight > 0 && !vs[i].failed && vs[i].wall <= sc.opts.MaxSlowdown*top.wall {
			idx = i
			break
		}
	}
	if !explore || idx == 0 || sc.opts.Exploration == 0 {
		return idx, false
	}
	var smaller []int
	for i := range idx {
		if fits(i) {
			smaller = append(smaller, i)
		}
	}
	if len(smaller) == 0 {
		return idx, false
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.rng.Float64() >= sc.opts.Exploration {
		return idx, false
	}
	return smaller[sc.rng.IntN(len(smaller))], true
}

// RunsOn names the class the history stats of a shape choose now,
// every class having workers and without exploration (the status page).
func (sc *SizeClasses) RunsOn(stats map[string]*ClassStats) string {
	m := make(map[string]ClassStats, len(stats))
	for k, c := range stats {
		m[k] = *c
	}
	i, _ := sc.choose(sc.views(m), nil, false)
	return sc.classes[i].Name
}

// learnedRequest is what a run on class idx should hold, from the
// history vs, for an action that states neither: its cores (mean CPU
// over wall time, rounded) and memory (mean peak, rounded up to a power
// of two: few distinct values, few buckets), each at most the class's
// own (0: the class says nothing, so nothing is filled), so that every
// worker of the class still matches. 0 leaves a value alone.
func (sc *SizeClasses) learnedRequest(vs []classView, idx int) (cores int, mem int64) {
	if !sc.opts.LearnedResources {
		return 0, 0
	}
	v := vs[idx]
	if v.weight == 0 {
		v = vs[len(vs)-1]
	}
	c := sc.classes[idx]
	if v.weight > 0 && v.wall > 0 && c.Cores > 1 {
		if n := int(math.Round(v.cpu / v.wall)); n > 1 {
			cores = min(n, c.Cores)
		}
	}
	if v.memory > 0 && c.Memory > 0 {
		mem = min(int64(1)<<min(62, int(math.Ceil(math.Log2(v.memory)))), c.Memory)
	}
	return cores, mem
}

// fallback says whether a run of an action placed on class cur, that
// ended with resp, failed there for want of size, and where its retry
// goes: the next larger class with workers. A smaller class failed the
// run when it timed out, ran out of a resource, or exited non-zero where
// a larger class's last run exited 0.
func (sc *SizeClasses) fallback(cur int, vs []classView, live []bool, resp *repb.ExecuteResponse) (next int, why string, ok bool) {
	next = -1
	for i := cur + 1; i < len(sc.classes); i++ {
		if live == nil || live[i] {
			next = i
			break
		}
	}
	if next < 0 {
		return 0, "", false
	}
	switch code := codes.Code(resp.GetStatus().GetCode()); {
	case code == codes.DeadlineExceeded:
		why = "timed out"
	case code == codes.ResourceExhausted:
		why = "ran out of a resource"
	case code == codes.OK && resp.GetResult() != nil && resp.Result.ExitCode != 0:
		for i := cur + 1; i < len(vs); i++ {
			if vs[i].weight > 0 && vs[i].exit == 0 {
				why = fmt.Sprintf("exited %d where class %s succeeded", resp.Result.ExitCode, sc.classes[i].Name)
				break
			}
		}
	}
	if why == "" {
		return 0, "", false
	}
	return next, why, true
}
