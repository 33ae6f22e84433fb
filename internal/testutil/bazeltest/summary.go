package bazeltest

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ProcessSummary is Bazel's "INFO: N processes: ..." line, which tells how
// the actions of a build ran. Bazel 2.1.0 says, for example,
//
//	INFO: 14 processes: 14 linux-sandbox.
//	INFO: 3 processes: 3 remote cache hit.
//
// and Bazel 4.2.3 also counts internal actions (and its N may disagree with the sum):
//
//	INFO: 29 processes: 15 internal, 14 linux-sandbox.
//	INFO: 7 processes: 5 remote cache hit, 2 internal.
//	INFO: 1 process: 1 internal.
type ProcessSummary struct {
	Line  string
	Total int
	// Counts maps each kind ("remote cache hit", "remote", "internal",
	// "linux-sandbox", "local", ...) to its count.
	Counts map[string]int
}

var (
	processSummaryRE = regexp.MustCompile(`(?m)^INFO: (\d+) process(?:es)?(?:: (.*?))?\.?[ \t\r]*$`)
	processCountRE   = regexp.MustCompile(`^(\d+) (.+)$`)
)

// Kinds of processes in a summary.
const (
	KindRemoteCacheHit = "remote cache hit"
	KindRemote         = "remote"
	KindInternal       = "internal"
)

// LastProcessSummary parses the last "INFO: N processes" line of Bazel's output.
func LastProcessSummary(output string) (ProcessSummary, bool) {
	matches := processSummaryRE.FindAllStringSubmatch(output, -1)
	if len(matches) == 0 {
		return ProcessSummary{}, false
	}
	m := matches[len(matches)-1]
	s := ProcessSummary{Line: strings.TrimSpace(m[0]), Counts: map[string]int{}}
	s.Total, _ = strconv.Atoi(m[1])
	if m[2] == "" {
		return s, true
	}
	for _, part := range strings.Split(m[2], ", ") {
		pm := processCountRE.FindStringSubmatch(strings.TrimSpace(part))
		if pm == nil {
			return ProcessSummary{}, false
		}
		n, _ := strconv.Atoi(pm[1])
		s.Counts[pm[2]] += n
	}
	return s, true
}

// Count returns how many processes of the given kind ran.
func (s ProcessSummary) Count(kind string) int { return s.Counts[kind] }

// Except returns the counts of every kind not listed, with zero counts left out.
func (s ProcessSummary) Except(kinds ...string) map[string]int {
	other := map[string]int{}
	for k, n := range s.Counts {
		if n != 0 && !slices.Contains(kinds, k) {
			other[k] = n
		}
	}
	return other
}
