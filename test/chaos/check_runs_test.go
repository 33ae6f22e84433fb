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

// TestGrowth: a process holding many more goroutines or open files at rest
// after the run than before it is flagged; modest growth and a process
// only seen after (a node started later) are not.
func TestGrowth(t *testing.T) {
	before := map[string]usage{
		"fe1": {fds: 40, goroutines: 120},
		"w1":  {fds: 20, goroutines: 30},
		"w2":  {fds: 20, goroutines: 30},
	}
	after := map[string]usage{
		"fe1": {fds: 60, goroutines: 180},  // modest
		"w1":  {fds: 25, goroutines: 900},  // leaked goroutines
		"w2":  {fds: 400, goroutines: 35},  // leaked files
		"fe2": {fds: 999, goroutines: 999}, // not seen before
	}
	over, summary := growth(before, after)
	var msgs []string
	for _, lk := range over {
		msgs = append(msgs, lk.msg)
	}
	all := strings.Join(msgs, "\n")
	if len(over) != 2 || !strings.Contains(all, "w1 holds more") || !strings.Contains(all, "w2 holds more") {
		t.Errorf("flagged:\n%s\nwant w1 and w2 only", all)
	}
	if !strings.Contains(summary, "fe1: 40→60 fds") {
		t.Errorf("summary %q does not show fe1's growth", summary)
	}
}

// TestCountOutsidePools: idle HTTP connections and gRPC's stream workers
// are pools, not leaks; everything else counts.
func TestCountOutsidePools(t *testing.T) {
	profile := `goroutine profile: total 141
64 @ 0x1 0x2
#	0x8d8831	net/http.(*persistConn).readLoop+0x171		/usr/local/go/src/net/http/transport.go:2330

64 @ 0x3
#	0x8da1e5	net/http.(*persistConn).writeLoop+0xe5	/usr/local/go/src/net/http/transport.go:2652

8 @ 0x4
#	0x9a0539	google.golang.org/grpc.(*Server).serverWorker+0x59	/root/go/pkg/mod/google.golang.org/grpc@v1.85.0/server.go:689

5 @ 0x5
#	0x10cba24	github.com/gantry-build/gantry/internal/server.(*leaderConns).handler+0x5a4	forward.go:213
`
	g, conns := countOutsidePools(profile)
	if g != 5 || conns != 64 {
		t.Errorf("countOutsidePools: %d goroutines, %d HTTP connections; want 5 and 64", g, conns)
	}
}
