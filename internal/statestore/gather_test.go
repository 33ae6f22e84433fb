package statestore

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestBusyCommitterGathersGroups: with many callers applying at once, the
// committer gathers after each large group, so that a record holds most
// of the callers' batches instead of the few queued as the previous
// record was written; every batch is still stored.
func TestBusyCommitterGathersGroups(t *testing.T) {
	dir := t.TempDir()
	s := openEmbedded(t, dir, EmbeddedOptions{})
	const callers, rounds = 48, 20
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				if err := s.Apply(context.Background(), []Mutation{put("r", fmt.Sprintf("c%02d-%02d", c, r), "x")}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	commits := s.Commits()
	per := float64(callers*rounds) / float64(commits)
	t.Logf("%d batches in %d records, %.1f a record", callers*rounds, commits, per)
	if per <= callers/2 {
		t.Errorf("%d batches of %d callers went into %d records, %.1f a record: want more than %d (half the callers)", callers*rounds, callers, commits, per, callers/2)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openEmbedded(t, dir, EmbeddedOptions{})
	if n := len(load(t, s, "r")); n != callers*rounds {
		t.Fatalf("reopened with %d batches, want %d", n, callers*rounds)
	}
}
