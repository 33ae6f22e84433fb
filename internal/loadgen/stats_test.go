package loadgen

import (
	"fmt"
	"testing"
	"time"
)

func ms2d(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	oneToHundred := make([]int, 100)
	for i := range oneToHundred {
		oneToHundred[i] = i + 1
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single p50", ms2d(7), 50, 7 * time.Millisecond},
		{"single p99", ms2d(7), 99, 7 * time.Millisecond},
		{"two p50 is the lower", ms2d(1, 2), 50, 1 * time.Millisecond},
		{"two p51 is the upper", ms2d(1, 2), 51, 2 * time.Millisecond},
		{"hundred p50", ms2d(oneToHundred...), 50, 50 * time.Millisecond},
		{"hundred p90", ms2d(oneToHundred...), 90, 90 * time.Millisecond},
		{"hundred p99", ms2d(oneToHundred...), 99, 99 * time.Millisecond},
		{"hundred p100", ms2d(oneToHundred...), 100, 100 * time.Millisecond},
		{"ten p99 is the max", ms2d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"ten p90", ms2d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
		{"tiny p is the min", ms2d(3, 4, 5), 0.1, 3 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []time.Duration
		want latencySummary
	}{
		{"none", nil, latencySummary{}},
		{"one", ms2d(4), latencySummary{n: 1, min: 4e6, mean: 4e6, p50: 4e6, p90: 4e6, p99: 4e6, max: 4e6}},
		{"unsorted", ms2d(30, 10, 20, 40), latencySummary{n: 4, min: 10e6, mean: 25e6, p50: 20e6, p90: 40e6, p99: 40e6, max: 40e6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tt.in...)
			if got := summarize(in); got != tt.want {
				t.Errorf("summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
			if fmt.Sprint(in) != fmt.Sprint(tt.in) {
				t.Errorf("summarize reordered its input to %v", in)
			}
		})
	}
}

func TestResultLine(t *testing.T) {
	s := &benchStats{ok: 200, failed: 3, cached: 1, concurrency: 8, elapsed: 4 * time.Second,
		latency: summarize(ms2d(1, 2, 3, 4))}
	want := "RESULT actions=200 errors=3 cached=1 concurrency=8 elapsed_s=4.000 rate=50.00 min_ms=1.000 mean_ms=2.500 p50_ms=2.000 p90_ms=4.000 p99_ms=4.000 max_ms=4.000"
	if got := s.resultLine(); got != want {
		t.Errorf("resultLine =\n%s\nwant\n%s", got, want)
	}
	if got := (&benchStats{}).rate(); got != 0 {
		t.Errorf("rate with no elapsed time = %v, want 0", got)
	}
}
