package asset

import (
	"fmt"
	"testing"
)

// TestFailureLogKeepsTheNewest: the log lists its failures newest first
// and forgets the oldest beyond its size.
func TestFailureLogKeepsTheNewest(t *testing.T) {
	l := NewFailureLog(3)
	if got := l.Recent(); len(got) != 0 {
		t.Fatalf("empty log: %v", got)
	}
	for i := range 5 {
		l.Add(Failure{URI: fmt.Sprint(i)})
		got := l.Recent()
		if want := min(i+1, 3); len(got) != want || got[0].URI != fmt.Sprint(i) || got[len(got)-1].URI != fmt.Sprint(i+1-want) {
			t.Fatalf("after %d adds: %v", i+1, got)
		}
	}
}
