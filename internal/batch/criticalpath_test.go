package batch

import (
	"testing"
	"time"
)

// TestCriticalPathOfEachExecute: the Execute step of each job learns
// the work waiting for it, the longest chain of its dependents: counted
// in nominal seconds before any job ran, then at the run times the
// finished jobs reported (per program, else overall).
func TestCriticalPathOfEachExecute(t *testing.T) {
	jobs := jobsOf("a", "b:a", "c:a", "link:b,c", "test:link", "leaf")
	args := map[string][]string{"a": {"/usr/bin/cc", "a.c"}, "b": {"cc", "b.c"}, "c": {"python3", "gen.py"},
		"link": {"ld", "-o", "x"}, "test": {"./x"}, "leaf": {"cc", "leaf.c"}}
	for _, j := range jobs {
		j.Args = args[j.Name]
	}
	ran := map[string]time.Duration{"a": 10 * time.Second, "b": 20 * time.Second, "c": 4 * time.Second, "leaf": 6 * time.Second}
	s := newSim(t, jobs, Limits{Uploads: 8, Executes: 8, Downloads: 8, Process: 8}, false, func(job string, q Queue) (time.Duration, Result) {
		if q == Execute {
			return time.Second, Result{Stats: Stats{Ran: ran[job]}}
		}
		return time.Second, Result{}
	})
	if sum := s.run(); !sum.OK() {
		t.Fatalf("the run failed: %+v", sum)
	}
	got := map[string]time.Duration{}
	for _, task := range s.c.tasks {
		got[task.Job.Name] = task.CriticalPath
	}
	want := map[string]time.Duration{
		// Before anything ran: b (or c), link, test in nominal seconds.
		"a": 3 * nominalJob, "leaf": 0,
		// a and leaf ran (cc: 10s and 6s, mean 8s; all: 8s): b's chain
		// is link and test, unseen programs at the overall mean.
		"b": 16 * time.Second, "c": 16 * time.Second,
		// b (cc, 20s) and c (python3, 4s) ran too: test at the mean of
		// all four, (10+20+4+6)/4 = 10s.
		"link": 10 * time.Second, "test": 0,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("job %s told the server %v of work waits for it, want %v", name, got[name], w)
		}
	}
}
