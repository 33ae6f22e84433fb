package chaos

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// recorder keeps the run's fault log and its wrong answers, in order; the
// first wrong answer stops the loop.
type recorder struct {
	seed  int64
	start time.Time

	mu     sync.Mutex
	faults []*faultEvent
	wrongs []string
	stop   chan struct{}
}

// faultEvent is one injected fault, from its start to its repair.
type faultEvent struct {
	kind, target string
	start, end   time.Time
	note         string
	// stage is, for a kill-worker, the stage of the killed worker's
	// actions (workerStage).
	stage string
}

func newRecorder(seed int64) *recorder {
	return &recorder{seed: seed, start: time.Now(), stop: make(chan struct{})}
}

func (r *recorder) since(t time.Time) string {
	return fmt.Sprintf("%7.1fs", t.Sub(r.start).Seconds())
}

// wrong records a wrong answer (a broken check).
func (r *recorder) wrong(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wrongs = append(r.wrongs, r.since(time.Now())+" "+s)
	if len(r.wrongs) == 1 {
		close(r.stop)
	}
}

func (r *recorder) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.wrongs) > 0
}

// begin records a fault's start.
func (r *recorder) begin(kind, target, note string) *faultEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := &faultEvent{kind: kind, target: target, start: time.Now(), note: note}
	r.faults = append(r.faults, e)
	return e
}

// end records a fault's repair.
func (r *recorder) end(e *faultEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.end = time.Now()
}

// faultLog is the fault log, one line per fault.
func (r *recorder) faultLog() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.faults {
		end := "not repaired"
		if !e.end.IsZero() {
			end = fmt.Sprintf("repaired at %s (%.1fs)", r.since(e.end), e.end.Sub(e.start).Seconds())
		}
		fmt.Fprintf(&b, "  %s %-14s %-8s %s %s\n", r.since(e.start), e.kind, e.target, end, e.note)
	}
	return b.String()
}

// windows returns each fault's [start, end+grace].
func (r *recorder) windows(grace time.Duration) [][2]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][2]time.Time
	for _, e := range r.faults {
		end := e.end
		if end.IsZero() {
			end = time.Now()
		}
		out = append(out, [2]time.Time{e.start, end.Add(grace)})
	}
	return out
}

// during reports whether a fault of one of kinds was in progress (or
// within grace of its repair) at some time between from and to.
func (r *recorder) during(from, to time.Time, grace time.Duration, kinds ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.faults {
		end := e.end
		if end.IsZero() {
			end = time.Now()
		}
		if slices.Contains(kinds, e.kind) && !e.start.After(to) && !end.Add(grace).Before(from) {
			return true
		}
	}
	return false
}

// byKind counts the faults by kind.
func (r *recorder) byKind() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, e := range r.faults {
		out[e.kind]++
	}
	return out
}

// killsByStage counts the kill-worker faults by the stage of the killed
// worker's actions.
func (r *recorder) killsByStage() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, e := range r.faults {
		if e.kind == "kill-worker" {
			out[e.stage]++
		}
	}
	return out
}

// failure is the message of a failed run: the seed, the first wrong answer
// and the fault log.
func (r *recorder) failure() string {
	r.mu.Lock()
	wrongs := append([]string(nil), r.wrongs...)
	r.mu.Unlock()
	more := ""
	if len(wrongs) > 1 {
		more = fmt.Sprintf("\n%d more wrong answers:\n  %s", len(wrongs)-1, strings.Join(wrongs[1:min(len(wrongs), 20)], "\n  "))
	}
	return fmt.Sprintf("chaos: seed %d (replay: go test ./test/chaos -run Chaos -chaos.seed %d)\nfirst wrong answer: %s%s\nfault log (seconds since the loop started):\n%s",
		r.seed, r.seed, wrongs[0], more, r.faultLog())
}
