package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func snap() Snapshot {
	s := Snapshot{Elapsed: 10 * time.Second, Total: 300, Done: 120, CacheHits: 100, Local: 2,
		Failed: 1, Skipped: 2, Blocked: 7}
	s.Queues[Scan] = QueueCount{Running: 2, Waiting: 5}
	s.Queues[Execute] = QueueCount{Running: 4, Waiting: 10}
	return s
}

func TestStatusLines(t *testing.T) {
	got := strings.Join(statusLines(snap()), "\n")
	want := "[123/300]  41%  12.0 jobs/s  100 cache hits  1 failed  2 skipped  7 waiting for deps  10.0s\n" +
		"  running/waiting: scan 2/5 cache 0/0 upload 0/0 execute 4/10 download 0/0 local 0/0"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	s := snap()
	s.Suspended = true
	if l := statusLines(s)[0]; !strings.HasSuffix(l, "10.0s  [suspended]") {
		t.Fatal(l)
	}
}

func TestPlain(t *testing.T) {
	var b bytes.Buffer
	p := NewPlain(&b)
	s := snap()
	p.Update(Event{Kind: StepStarted, Job: "a"}, s)
	p.Update(Event{Kind: JobDone, Job: "a.o", CacheHit: true}, s)
	p.Update(Event{Kind: JobDone, Job: "b.o", Local: true}, s)
	p.Update(Event{Kind: StepOutput, Job: "c.o", Output: []byte("c.c:1: warning: x")}, s)
	p.Update(Event{Kind: JobFailed, Job: "d.o", Queue: Execute, Err: errors.New("exit status 1"), Output: []byte("d.c:2: error: y\n")}, s)
	p.Update(Event{Kind: JobSkipped, Job: "e", Cause: "d.o"}, s)
	p.Update(Event{Kind: Tick}, s)
	p.Update(Event{Kind: Stopping, Err: errStopped}, s)
	want := `[123/300] done a.o (cache hit)
[123/300] done b.o (local)
c.c:1: warning: x
[123/300] FAILED d.o (execute): exit status 1
d.c:2: error: y
[123/300] skipped e: it depends on d.o, which failed
stopping: stopped: waiting for the running steps to end
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// countingWriter counts the writes made to it.
type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) { w.n++; return len(p), nil }

// Events with nothing to print make no write: on a pipe each would be a
// system call, about fifteen per job.
func TestPlainSilentEventsWriteNothing(t *testing.T) {
	var w countingWriter
	p := NewPlain(&w)
	for _, k := range []EventKind{StepStarted, Tick, End} {
		p.Update(Event{Kind: k, Job: "a"}, snap())
	}
	if w.n != 0 {
		t.Fatalf("%d writes for events that print nothing", w.n)
	}
	p.Update(Event{Kind: JobDone, Job: "a"}, snap())
	if w.n != 1 {
		t.Fatalf("%d writes for one finished job, want 1", w.n)
	}
}

func TestTerminalRedrawsInPlaceAndThrottles(t *testing.T) {
	var b bytes.Buffer
	now := time.Unix(0, 0)
	term := NewTerminal(&b, 60, func() time.Time { return now })
	s := snap()
	term.Update(Event{Kind: StepStarted}, s)
	first := b.String()
	if strings.Count(first, "\n") != 2 || strings.Contains(first, "\x1b[") {
		t.Fatalf("first draw %q", first)
	}
	for _, l := range strings.Split(strings.TrimSuffix(first, "\n"), "\n") {
		if len(l) >= 60 {
			t.Fatalf("line not cut to the width: %q", l)
		}
	}
	// 50ms later: too soon to redraw.
	b.Reset()
	now = now.Add(50 * time.Millisecond)
	term.Update(Event{Kind: JobDone, Job: "x"}, s)
	if b.Len() != 0 {
		t.Fatalf("redrawn after 50ms: %q", b.String())
	}
	// A failure is printed at once above the block, which is erased
	// (two lines up, clear) and, being too soon, not redrawn yet.
	term.Update(Event{Kind: JobFailed, Job: "y", Queue: Local, Err: errors.New("boom")}, s)
	if got, want := b.String(), "\x1b[2A\r\x1b[J[123/300] \x1b[1;31mFAILED\x1b[0m y (local): boom\n"; got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	// 100ms after the first draw the tick redraws; the block was erased
	// already, so nothing is erased twice.
	b.Reset()
	now = now.Add(50 * time.Millisecond)
	term.Update(Event{Kind: Tick}, s)
	if got := b.String(); strings.Contains(got, "\x1b[") || strings.Count(got, "\n") != 2 {
		t.Fatalf("tick redraw %q", got)
	}
	// The End always redraws, erasing the block first.
	b.Reset()
	term.Update(Event{Kind: End}, s)
	if got := b.String(); !strings.HasPrefix(got, "\x1b[2A\r\x1b[J[123/300]") {
		t.Fatalf("end redraw %q", got)
	}
}

func sampleSummary() Summary {
	return Summary{Elapsed: 12300 * time.Millisecond, Total: 300, Succeeded: 296, CacheHits: 250, Local: 2,
		Failed: 1, Skipped: 2, NotRun: 1, BytesUp: 3 << 20, BytesDown: 1536, BlobsUp: 40, BlobsDown: 300,
		Queues: []QueueSummary{
			{Queue: "scan", Steps: 300, Time: 4100 * time.Millisecond},
			{Queue: "cache", Steps: 299, Time: 900 * time.Millisecond},
			{Queue: "upload", Steps: 49, Time: 2 * time.Second},
			{Queue: "execute", Steps: 49, Time: 75 * time.Second, Failed: 1},
			{Queue: "download", Steps: 298, Time: 300 * time.Millisecond},
			{Queue: "local", Steps: 2, Time: 0},
		},
		Failures: []Failure{{Job: "d.o", Queue: "execute", Error: "exit status 1\nmore"}},
	}
}

func TestSummaryTable(t *testing.T) {
	var b bytes.Buffer
	if err := sampleSummary().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := `ran 300 jobs in 12.3s: 296 succeeded (250 cache hits, 84.5%; 2 run locally), 1 failed, 2 skipped, 0 cancelled, 1 not run
uploaded 3.0 MiB in 40 blobs, downloaded 1.5 KiB in 300 blobs
queue      steps     time     mean failed
scan         300     4.1s     13ms      0
cache        299    900ms      3ms      0
upload        49     2.0s     40ms      0
execute       49    1m15s     1.5s      1
download     298    300ms      1ms      0
local          2       0s       0s      0
failed:
  d.o (execute): exit status 1 ...
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestSummaryJSON(t *testing.T) {
	var b bytes.Buffer
	if err := sampleSummary().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"seconds": 12.3, "total": 300.0, "cache_hits": 250.0,
		"bytes_up": float64(3 << 20), "not_run": 1.0, "stopped": false} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if r := got["cache_hit_rate"].(float64); r < 0.844 || r > 0.845 {
		t.Errorf("rate %v", r)
	}
	q := got["queues"].([]any)[3].(map[string]any)
	if q["queue"] != "execute" || q["seconds"] != 75.0 || q["failed"] != 1.0 {
		t.Errorf("queue %v", q)
	}
	f := got["failures"].([]any)[0].(map[string]any)
	if f["job"] != "d.o" || f["error"] != "exit status 1\nmore" {
		t.Errorf("failure %v", f)
	}
	// Empty lists are [] not null, for consumers that iterate.
	b.Reset()
	Summary{}.WriteJSON(&b)
	if !strings.Contains(b.String(), `"failures": []`) {
		t.Errorf("%s", b.String())
	}
}
