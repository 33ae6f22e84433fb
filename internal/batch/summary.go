package batch

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Summary is the outcome of a run.
type Summary struct {
	Elapsed time.Duration
	Total   int
	// Succeeded counts the jobs that went through the chain; CacheHits and
	// Local count those of them served from the cache or run locally.
	Succeeded, CacheHits, Local int
	// Failed jobs had a step fail; Skipped ones depended on a failed job;
	// Cancelled ones had a step cut short by the stop; NotRun ones never
	// started because the run stopped.
	Failed, Skipped, Cancelled, NotRun int
	BytesUp, BytesDown                 int64
	BlobsUp, BlobsDown                 int
	// Queues has one entry per queue, in chain order.
	Queues []QueueSummary
	// Failures lists the failed jobs in the order they failed.
	Failures []Failure
	// Stopped is true when the run was stopped (Stop or ctx) before the end.
	Stopped bool
	// CPU is the client's own CPU time (user and system) and LocalCPU that
	// of the local processes it ran (dependency listings, local compiles),
	// filled in by the caller (the scheduler does not measure them).
	CPU, LocalCPU time.Duration
}

// QueueSummary is what one queue did.
type QueueSummary struct {
	Queue string
	// Steps counts the steps run in the queue; Time is their summed
	// duration (so it may exceed the elapsed time when steps overlap).
	Steps  int
	Time   time.Duration
	Failed int
}

// Failure is one failed job.
type Failure struct {
	Job   string `json:"job"`
	Queue string `json:"queue"`
	Error string `json:"error"`
}

// OK reports whether every job succeeded.
func (s Summary) OK() bool { return s.Succeeded == s.Total }

// CacheHitRate is the share of the succeeded jobs served from the cache, 0
// when none succeeded.
func (s Summary) CacheHitRate() float64 {
	if s.Succeeded == 0 {
		return 0
	}
	return float64(s.CacheHits) / float64(s.Succeeded)
}

// WriteTable writes the summary for people: the counts, the bytes moved,
// one row per queue and the failures.
func (s Summary) WriteTable(w io.Writer) error {
	var b strings.Builder
	verb := "ran"
	if s.Stopped {
		verb = "stopped after"
	}
	fmt.Fprintf(&b, "%s %d jobs in %s: %d succeeded (%d cache hits, %.1f%%; %d run locally), %d failed, %d skipped, %d cancelled, %d not run\n",
		verb, s.Total, fmtDuration(s.Elapsed), s.Succeeded, s.CacheHits, 100*s.CacheHitRate(), s.Local,
		s.Failed, s.Skipped, s.Cancelled, s.NotRun)
	fmt.Fprintf(&b, "uploaded %s in %d blobs, downloaded %s in %d blobs\n",
		fmtBytes(s.BytesUp), s.BlobsUp, fmtBytes(s.BytesDown), s.BlobsDown)
	if s.CPU > 0 || s.LocalCPU > 0 {
		perJob := time.Duration(0)
		if s.Total > 0 {
			perJob = s.CPU / time.Duration(s.Total)
		}
		fmt.Fprintf(&b, "client CPU %s (%s per job), local processes %s\n", fmtDuration(s.CPU), fmtDuration(perJob), fmtDuration(s.LocalCPU))
	}
	fmt.Fprintf(&b, "%-9s %6s %8s %8s %6s\n", "queue", "steps", "time", "mean", "failed")
	for _, q := range s.Queues {
		mean := time.Duration(0)
		if q.Steps > 0 {
			mean = q.Time / time.Duration(q.Steps)
		}
		fmt.Fprintf(&b, "%-9s %6d %8s %8s %6d\n", q.Queue, q.Steps, fmtDuration(q.Time), fmtDuration(mean), q.Failed)
	}
	if len(s.Failures) > 0 {
		fmt.Fprintf(&b, "failed:\n")
		for _, f := range s.Failures {
			fmt.Fprintf(&b, "  %s (%s): %s\n", f.Job, f.Queue, firstLine(f.Error))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// QueueJSON is one queue's line in SummaryJSON.
type QueueJSON struct {
	Queue   string  `json:"queue"`
	Steps   int     `json:"steps"`
	Seconds float64 `json:"seconds"`
	Failed  int     `json:"failed"`
}

// SummaryJSON is the form `gantry batch --json` prints (Summary's
// MarshalJSON); scripts and tests decode it.
type SummaryJSON struct {
	Seconds      float64     `json:"seconds"`
	Total        int         `json:"total"`
	Succeeded    int         `json:"succeeded"`
	CacheHits    int         `json:"cache_hits"`
	CacheHitRate float64     `json:"cache_hit_rate"`
	Local        int         `json:"local"`
	Failed       int         `json:"failed"`
	Skipped      int         `json:"skipped"`
	Cancelled    int         `json:"cancelled"`
	NotRun       int         `json:"not_run"`
	BytesUp      int64       `json:"bytes_up"`
	BytesDown    int64       `json:"bytes_down"`
	BlobsUp      int         `json:"blobs_up"`
	BlobsDown    int         `json:"blobs_down"`
	Stopped      bool        `json:"stopped"`
	CPUSeconds   float64     `json:"cpu_seconds"`
	LocalCPU     float64     `json:"local_cpu_seconds"`
	Queues       []QueueJSON `json:"queues"`
	Failures     []Failure   `json:"failures"`
}

// MarshalJSON writes the summary with snake_case keys and durations in
// seconds, the form `--json` prints.
func (s Summary) MarshalJSON() ([]byte, error) {
	j := SummaryJSON{Seconds: s.Elapsed.Seconds(), Total: s.Total, Succeeded: s.Succeeded,
		CacheHits: s.CacheHits, CacheHitRate: s.CacheHitRate(), Local: s.Local, Failed: s.Failed,
		Skipped: s.Skipped, Cancelled: s.Cancelled, NotRun: s.NotRun, BytesUp: s.BytesUp, BytesDown: s.BytesDown,
		BlobsUp: s.BlobsUp, BlobsDown: s.BlobsDown, Stopped: s.Stopped, CPUSeconds: s.CPU.Seconds(), LocalCPU: s.LocalCPU.Seconds(),
		Queues: []QueueJSON{}, Failures: []Failure{}}
	for _, q := range s.Queues {
		j.Queues = append(j.Queues, QueueJSON{q.Queue, q.Steps, q.Time.Seconds(), q.Failed})
	}
	j.Failures = append(j.Failures, s.Failures...)
	return json.Marshal(j)
}

// WriteJSON writes the summary as indented JSON and a newline.
func (s Summary) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func fmtDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}

func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i])
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
