package loadgen

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// benchStats is the outcome of a run.
type benchStats struct {
	ok, failed, cached, cancelled int
	firstErr                      error
	elapsed                       time.Duration
	latency                       latencySummary
	concurrency                   int
}

// rate is successful actions per second.
func (s *benchStats) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ok) / s.elapsed.Seconds()
}

// report prints the human-readable report and the RESULT line.
func (s *benchStats) report(w io.Writer) {
	fmt.Fprintf(w, "completed:  %d ok, %d failed, %d cache hits", s.ok, s.failed, s.cached)
	if s.cancelled > 0 {
		fmt.Fprintf(w, ", %d cancelled by the interrupt", s.cancelled)
	}
	fmt.Fprintln(w)
	if s.firstErr != nil {
		fmt.Fprintf(w, "first error: %v\n", s.firstErr)
	}
	fmt.Fprintf(w, "elapsed:    %s\n", s.elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "rate:       %.1f actions/s\n", s.rate())
	l := s.latency
	if l.n > 0 {
		fmt.Fprintf(w, "latency:    min %s  mean %s  p50 %s  p90 %s  p99 %s  max %s (Execute call to completed operation)\n",
			fmtMS(l.min), fmtMS(l.mean), fmtMS(l.p50), fmtMS(l.p90), fmtMS(l.p99), fmtMS(l.max))
	}
	fmt.Fprintln(w, s.resultLine())
}

// resultLine is the machine-readable summary.
func (s *benchStats) resultLine() string {
	l := s.latency
	return fmt.Sprintf("RESULT actions=%d errors=%d cached=%d concurrency=%d elapsed_s=%.3f rate=%.2f min_ms=%.3f mean_ms=%.3f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f",
		s.ok, s.failed, s.cached, s.concurrency, s.elapsed.Seconds(), s.rate(),
		ms(l.min), ms(l.mean), ms(l.p50), ms(l.p90), ms(l.p99), ms(l.max))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fmtMS formats a latency with three significant digits or so.
func fmtMS(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }

// latencySummary describes a set of latencies.
type latencySummary struct {
	n                             int
	min, mean, p50, p90, p99, max time.Duration
}

// summarize computes the summary of ls (which it does not modify). All
// fields are zero for no latencies.
func summarize(ls []time.Duration) latencySummary {
	if len(ls) == 0 {
		return latencySummary{}
	}
	sorted := slices.Clone(ls)
	slices.Sort(sorted)
	var sum time.Duration
	for _, l := range sorted {
		sum += l
	}
	return latencySummary{
		n:    len(sorted),
		min:  sorted[0],
		mean: sum / time.Duration(len(sorted)),
		p50:  percentile(sorted, 50),
		p90:  percentile(sorted, 90),
		p99:  percentile(sorted, 99),
		max:  sorted[len(sorted)-1],
	}
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value that at least p percent of the
// values are less than or equal to.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
