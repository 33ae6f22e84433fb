package bazeltest

import (
	"reflect"
	"testing"
)

// TestLastProcessSummary checks the parser against lines real Bazel 2.1.0 and 4.2.3
// print. It needs no client and runs under -short too.
func TestLastProcessSummary(t *testing.T) {
	tests := []struct {
		name   string
		output string
		ok     bool
		total  int
		counts map[string]int
	}{
		{
			name:   "bazel2 local",
			output: "INFO: Elapsed time: 7.965s, Critical Path: 0.28s\nINFO: 14 processes: 14 linux-sandbox.\nINFO: Build completed successfully, 29 total actions\n",
			ok:     true, total: 14,
			counts: map[string]int{"linux-sandbox": 14},
		},
		{
			name:   "bazel4 local",
			output: "INFO: 29 processes: 15 internal, 14 linux-sandbox.\n",
			ok:     true, total: 29,
			counts: map[string]int{"internal": 15, "linux-sandbox": 14},
		},
		{
			name:   "bazel4 total disagrees with the sum",
			output: "INFO: 3 processes: 4 linux-sandbox.\n",
			ok:     true, total: 3,
			counts: map[string]int{"linux-sandbox": 4},
		},
		{
			name:   "bazel2 cache hits",
			output: "INFO: 3 processes: 3 remote cache hit.\n",
			ok:     true, total: 3,
			counts: map[string]int{"remote cache hit": 3},
		},
		{
			name:   "bazel4 cache hits",
			output: "INFO: 7 processes: 5 remote cache hit, 2 internal.\r\n",
			ok:     true, total: 7,
			counts: map[string]int{"remote cache hit": 5, "internal": 2},
		},
		{
			name:   "remote execution",
			output: "INFO: 20 processes: 2 remote cache hit, 12 remote, 6 internal.\n",
			ok:     true, total: 20,
			counts: map[string]int{"remote cache hit": 2, "remote": 12, "internal": 6},
		},
		{
			name:   "singular",
			output: "INFO: 1 process: 1 internal.\n",
			ok:     true, total: 1,
			counts: map[string]int{"internal": 1},
		},
		{
			name:   "none",
			output: "INFO: 0 processes.\n",
			ok:     true, total: 0,
			counts: map[string]int{},
		},
		{
			name:   "last line wins",
			output: "INFO: 14 processes: 14 linux-sandbox.\nfoo\nINFO: 14 processes: 14 remote cache hit.\n",
			ok:     true, total: 14,
			counts: map[string]int{"remote cache hit": 14},
		},
		{
			name:   "missing",
			output: "ERROR: build did not complete\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := LastProcessSummary(tc.output)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if s.Total != tc.total || !reflect.DeepEqual(s.Counts, tc.counts) {
				t.Errorf("got total %d counts %v, want %d %v", s.Total, s.Counts, tc.total, tc.counts)
			}
		})
	}
	s, _ := LastProcessSummary("INFO: 9 processes: 5 remote cache hit, 2 internal, 2 linux-sandbox.\n")
	if got, want := s.Except(KindRemoteCacheHit, KindInternal), map[string]int{"linux-sandbox": 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("Except = %v, want %v", got, want)
	}
}
