package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestRunChecks: the run-count checks flag an action that ran twice with no
// fault in its time and one whose success no run produced, and accept a
// second run that a fault explains. No cluster: the checks alone.
func TestRunChecks(t *testing.T) {
	rec := newRecorder(1)
	now := time.Now()
	ev := rec.begin("kill-worker", "w1", "")
	ev.start, ev.end = now.Add(-10*time.Second), now.Add(-9*time.Second)

	mk := func(key string, start, end time.Duration) *outcome {
		return &outcome{a: &action{key: key, kind: kindOK}, start: now.Add(start), end: now.Add(end), final: "succeeded"}
	}
	calm := mk("calm-twice", -5*time.Minute, -4*time.Minute)
	faulted := mk("faulted-twice", -11*time.Second, -8*time.Second)
	never := mk("never-ran", -3*time.Minute, -2*time.Minute)
	counter := &runCounter{runs: map[string][]run{
		"calm-twice":    {{at: calm.start}, {at: calm.start}},
		"faulted-twice": {{at: faulted.start}, {at: faulted.start}},
	}}
	c := &finalCheck{rec: rec, counter: counter, l: &load{outcomes: []*outcome{calm, faulted, never}}}
	c.runs()

	all := strings.Join(rec.wrongs, "\n")
	for _, want := range []string{"calm-twice (", "never-ran ("} {
		if !strings.Contains(all, want) {
			t.Errorf("no wrong answer about %s; wrong answers:\n%s", want, all)
		}
	}
	if strings.Contains(all, "faulted-twice") {
		t.Errorf("a second run that a fault explains is flagged:\n%s", all)
	}
	if c.duplicates != 2 || c.runsDist[2] != 2 || c.runsDist[0] != 1 {
		t.Errorf("duplicates %d, distribution %v; want 2 and {0: 1, 2: 2}", c.duplicates, c.runsDist)
	}
}
