package batch

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// NewDisplay returns the progress display for f: a Terminal when f is a
// terminal (and TERM is not "dumb"), else Plain log lines.
func NewDisplay(f *os.File) Progress {
	if width, ok := terminalWidth(f); ok && os.Getenv("TERM") != "dumb" {
		return NewTerminal(f, width, time.Now)
	}
	return NewPlain(f)
}

// Plain writes one line per finished job and per notice, for logs and
// pipes; nothing is ever redrawn.
type Plain struct {
	w io.Writer
}

// NewPlain returns a Plain display writing to w.
func NewPlain(w io.Writer) *Plain { return &Plain{w: w} }

// Update writes the lines for e.
func (p *Plain) Update(e Event, s Snapshot) {
	var b strings.Builder
	if e.Kind == JobDone {
		fmt.Fprintf(&b, "%s done %s%s\n", counter(s), e.Job, how(e))
	}
	writeMessage(&b, e, s, false)
	if b.Len() > 0 { // most events say nothing here: no empty writes
		io.WriteString(p.w, b.String())
	}
}

// Terminal keeps a block of status lines at the bottom of a terminal,
// redrawn in place at most every 100ms; failures, job output and notices
// are printed above it.
type Terminal struct {
	w     io.Writer
	width int
	now   func() time.Time
	last  time.Time // when the block was last drawn
	drawn int       // lines of the block on screen now
}

// minRedraw is the least time between two redraws of the block.
const minRedraw = 100 * time.Millisecond

// NewTerminal returns a Terminal display writing to w, a terminal width
// columns wide (lines are cut to fit, so that none wraps and the redraw
// stays in place); now is the clock used to throttle the redraws.
func NewTerminal(w io.Writer, width int, now func() time.Time) *Terminal {
	return &Terminal{w: w, width: width, now: now}
}

// Update prints what e has to say above the block and redraws the block
// when the last redraw is old enough (always at the End).
func (t *Terminal) Update(e Event, s Snapshot) {
	var b strings.Builder
	var msg strings.Builder
	writeMessage(&msg, e, s, true)
	if msg.Len() > 0 {
		t.erase(&b)
		b.WriteString(msg.String())
	}
	now := t.now()
	if e.Kind == End || now.Sub(t.last) >= minRedraw {
		t.erase(&b)
		for _, l := range statusLines(s) {
			if t.width > 1 && len(l) >= t.width {
				l = l[:t.width-1]
			}
			b.WriteString(l + "\n")
			t.drawn++
		}
		t.last = now
	}
	io.WriteString(t.w, b.String())
}

// erase removes the block: up to its first line, then clear to the end of
// the screen.
func (t *Terminal) erase(b *strings.Builder) {
	if t.drawn > 0 {
		fmt.Fprintf(b, "\x1b[%dA\r\x1b[J", t.drawn)
		t.drawn = 0
	}
}

// statusLines renders the block: the totals, then each queue's running and
// waiting steps.
func statusLines(s Snapshot) []string {
	pct := 0
	if s.Total > 0 {
		pct = 100 * s.Finished() / s.Total
	}
	first := fmt.Sprintf("%s %3d%%  %.1f jobs/s  %d cache hits  %d failed", counter(s), pct, s.Rate(), s.CacheHits, s.Failed)
	if s.Skipped > 0 {
		first += fmt.Sprintf("  %d skipped", s.Skipped)
	}
	if s.Blocked > 0 {
		first += fmt.Sprintf("  %d waiting for deps", s.Blocked)
	}
	first += "  " + fmtDuration(s.Elapsed)
	switch {
	case s.Suspended:
		first += "  [suspended]"
	case s.Stopping:
		first += "  [stopping]"
	}
	second := "  running/waiting:"
	for _, q := range Queues {
		c := s.Queues[q]
		second += fmt.Sprintf(" %s %d/%d", q, c.Running, c.Waiting)
	}
	return []string{first, second}
}

// counter is "[finished/total]", padded so the lines stay aligned.
func counter(s Snapshot) string {
	w := len(fmt.Sprint(s.Total))
	return fmt.Sprintf("[%*d/%d]", w, s.Finished(), s.Total)
}

func how(e Event) string {
	switch {
	case e.CacheHit:
		return " (cache hit)"
	case e.Local:
		return " (local)"
	}
	return ""
}

// writeMessage writes what an event has to tell beyond the counts, the
// same for both displays (red FAILED on a terminal).
func writeMessage(b *strings.Builder, e Event, s Snapshot, color bool) {
	switch e.Kind {
	case StepOutput:
		writeOutput(b, e.Output)
	case JobFailed:
		failed := "FAILED"
		if color {
			failed = "\x1b[1;31mFAILED\x1b[0m"
		}
		fmt.Fprintf(b, "%s %s %s (%s): %v\n", counter(s), failed, e.Job, e.Queue, e.Err)
		writeOutput(b, e.Output)
	case JobSkipped:
		fmt.Fprintf(b, "%s skipped %s: it depends on %s, which failed\n", counter(s), e.Job, e.Cause)
	case JobCancelled:
		fmt.Fprintf(b, "%s cancelled %s (%s)\n", counter(s), e.Job, e.Queue)
	case Stopping:
		fmt.Fprintf(b, "stopping: %v\n", e.Err)
	case Suspended:
		b.WriteString("suspended: no new step starts until resumed\n")
	case Resumed:
		b.WriteString("resumed\n")
	}
}

func writeOutput(b *strings.Builder, out []byte) {
	if len(out) == 0 {
		return
	}
	b.Write(out)
	if out[len(out)-1] != '\n' {
		b.WriteByte('\n')
	}
}
