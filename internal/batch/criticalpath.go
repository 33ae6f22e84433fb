package batch

import (
	"math/bits"
	"path/filepath"
	"time"
)

// Critical path first: each job's Execute step tells the server how much
// work waits for it (Task.CriticalPath), so that the server, which orders
// an invocation's longest expected work first, starts a short job that a
// long chain depends on before a long job nothing waits for.
//
// The work waiting for a job is the longest chain of its dependents,
// direct or not, each counted at its estimated duration. Estimates come
// from this run only (the client keeps no record between runs): a job
// counts as the mean run time of the finished jobs of the same program
// (the base name of the command's first word), else of all finished
// jobs, else nominalJob; so before any job finished, the estimate is the
// chain's length in nominal seconds. A run time is what the remote worker
// reported (or the local run's), for jobs that ran.

// nominalJob is the estimated duration of a job when no job has finished
// yet.
const nominalJob = time.Second

// criticalPaths keeps the estimates and the tails (the work waiting for
// each task) of one run. The core calls it from its one goroutine.
type criticalPaths struct {
	// order are the tasks, each before its dependents.
	order []*task
	tail  map[*task]time.Duration
	// perTool and all are the run times seen (sum, count).
	perTool map[string]runTimes
	all     runTimes
	// seen counts the run times observed; the tails are worked out again
	// when it reaches a power of two (the estimates change most at
	// first), so a run of n jobs pays O(log n) passes over its graph.
	seen  int
	stale bool
}

type runTimes struct {
	sum time.Duration
	n   int
}

func (r runTimes) mean() time.Duration { return r.sum / time.Duration(r.n) }

// newCriticalPaths estimates for tasks; without dependencies (a
// compile_commands.json) nothing waits for any of them, and it keeps
// nothing.
func newCriticalPaths(tasks []*task) *criticalPaths {
	cp := &criticalPaths{perTool: map[string]runTimes{}}
	for _, t := range tasks {
		if len(t.Job.Deps) > 0 {
			cp.order, cp.stale = topological(tasks), true
			break
		}
	}
	return cp
}

func toolOf(t *task) string { return filepath.Base(t.Job.Args[0]) }

// observe records that t's command ran for d.
func (cp *criticalPaths) observe(t *task, d time.Duration) {
	if d <= 0 || cp.order == nil {
		return
	}
	r := cp.perTool[toolOf(t)]
	r.sum, r.n = r.sum+d, r.n+1
	cp.perTool[toolOf(t)] = r
	cp.all.sum, cp.all.n = cp.all.sum+d, cp.all.n+1
	cp.seen++
	if bits.OnesCount(uint(cp.seen)) == 1 {
		cp.stale = true
	}
}

// estimate is t's expected run time.
func (cp *criticalPaths) estimate(t *task) time.Duration {
	if r := cp.perTool[toolOf(t)]; r.n > 0 {
		return r.mean()
	}
	if cp.all.n > 0 {
		return cp.all.mean()
	}
	return nominalJob
}

// of is the work waiting for t: its longest chain of dependents.
func (cp *criticalPaths) of(t *task) time.Duration {
	if cp.stale {
		cp.recompute()
	}
	return cp.tail[t]
}

// recompute works every task's tail out, dependents first.
func (cp *criticalPaths) recompute() {
	cp.stale = false
	if cp.tail == nil {
		cp.tail = make(map[*task]time.Duration, len(cp.order))
	}
	for i := len(cp.order) - 1; i >= 0; i-- {
		t := cp.order[i]
		var longest time.Duration
		for _, d := range t.dependants {
			longest = max(longest, cp.estimate(d)+cp.tail[d])
		}
		cp.tail[t] = longest
	}
}

// topological orders tasks so that each comes before its dependents
// (Kahn's algorithm; the graph has no cycle: checkJobs).
func topological(tasks []*task) []*task {
	deps := make(map[*task]int, len(tasks))
	order := make([]*task, 0, len(tasks))
	for _, t := range tasks {
		deps[t] = len(t.Job.Deps)
		if deps[t] == 0 {
			order = append(order, t)
		}
	}
	for i := 0; i < len(order); i++ {
		for _, d := range order[i].dependants {
			if deps[d]--; deps[d] == 0 {
				order = append(order, d)
			}
		}
	}
	return order
}
