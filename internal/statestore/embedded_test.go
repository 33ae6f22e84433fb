package statestore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func embeddedFactory(opts EmbeddedOptions) factory {
	return func(t *testing.T) func() Store {
		dir := t.TempDir()
		return func() Store {
			s, err := OpenEmbeddedWith(dir, opts)
			if err != nil {
				t.Fatalf("OpenEmbedded: %v", err)
			}
			return s
		}
	}
}

func TestEmbeddedConformance(t *testing.T) {
	runConformance(t, embeddedFactory(EmbeddedOptions{}))
}

// With compaction at every turn, the suite must pass just the same.
func TestEmbeddedConformanceCompactingOften(t *testing.T) {
	runConformance(t, embeddedFactory(EmbeddedOptions{CompactMinBytes: 1, CompactRatio: 1}))
}

func openEmbedded(t *testing.T, dir string, opts EmbeddedOptions) *Embedded {
	t.Helper()
	s, err := OpenEmbeddedWith(dir, opts)
	if err != nil {
		t.Fatalf("OpenEmbedded: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func logFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "log.*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// writeRecords applies n batches of one record each, key%02d = v%d, and
// returns the log's size after each.
func writeRecords(t *testing.T, dir string, n int) []int64 {
	t.Helper()
	s := openEmbedded(t, dir, EmbeddedOptions{})
	var sizes []int64
	for i := 0; i < n; i++ {
		apply(t, s, put("k", fmt.Sprintf("key%02d", i), fmt.Sprintf("v%d-%s", i, strings.Repeat("p", 50))))
		fi, err := os.Stat(logFiles(t, dir)[0])
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return sizes
}

func TestEmbeddedTornTail(t *testing.T) {
	dir := t.TempDir()
	sizes := writeRecords(t, dir, 5)
	log := logFiles(t, dir)[0]

	// A crash in the middle of the fifth record's write.
	if err := os.Truncate(log, sizes[3]+(sizes[4]-sizes[3])/2); err != nil {
		t.Fatal(err)
	}
	s := openEmbedded(t, dir, EmbeddedOptions{})
	if n := len(load(t, s, "k")); n != 4 {
		t.Fatalf("after a torn fifth record: %d records, want 4", n)
	}
	apply(t, s, put("k", "after", "crash"))
	s.Close()

	// Garbage after the last record (a write whose blocks were allocated
	// but not written, or junk).
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(bytes.Repeat([]byte{0}, 300))
	f.Close()
	s = openEmbedded(t, dir, EmbeddedOptions{})
	wantKeys := []string{"after", "key00", "key01", "key02", "key03"}
	got := load(t, s, "k")
	if len(got) != len(wantKeys) {
		t.Fatalf("after zeros at the tail: %v, want keys %v", got, wantKeys)
	}
	apply(t, s, put("k", "more", "x"))
	s.Close()
	f, _ = os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("\x13\x00\x00\x00garbage that is no record at all"))
	f.Close()
	s = openEmbedded(t, dir, EmbeddedOptions{})
	if n := len(load(t, s, "k")); n != 6 {
		t.Fatalf("after garbage at the tail: %d records, want 6", n)
	}
	s.Close()

	// A header cut short.
	fi, _ := os.Stat(log)
	f, _ = os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{1, 2, 3})
	f.Close()
	s = openEmbedded(t, dir, EmbeddedOptions{})
	if n := len(load(t, s, "k")); n != 6 {
		t.Fatalf("after a short header: %d records, want 6", n)
	}
	s.Close()
	if fi2, _ := os.Stat(log); fi2.Size() != fi.Size() {
		t.Fatalf("the torn tail was not cut off: %d bytes, want %d", fi2.Size(), fi.Size())
	}
}

func TestEmbeddedCorruptionInTheMiddleFails(t *testing.T) {
	dir := t.TempDir()
	sizes := writeRecords(t, dir, 5)
	log := logFiles(t, dir)[0]
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	b[sizes[1]+20] ^= 0x40 // in the third record's payload
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := OpenEmbedded(dir)
	if err == nil {
		s.Close()
		t.Fatal("OpenEmbedded succeeded over a corrupt record followed by intact ones")
	}
	if !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "intact records follow") {
		t.Fatalf("unclear error: %v", err)
	}
	t.Log(err)
}

func TestEmbeddedCompaction(t *testing.T) {
	dir := t.TempDir()
	opts := EmbeddedOptions{CompactMinBytes: 64 << 10, CompactRatio: 4}
	s := openEmbedded(t, dir, opts)
	value := strings.Repeat("v", 200)
	for round := 0; round < 200; round++ {
		var batch []Mutation
		for k := 0; k < 20; k++ {
			batch = append(batch, put("k", fmt.Sprintf("key%02d", k), fmt.Sprintf("%d-%s", round, value)))
		}
		batch = append(batch, put("gone", fmt.Sprint(round), "x"), del("gone", fmt.Sprint(round-1)))
		apply(t, s, batch...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Compactions == 0 || st.CompactErr != nil {
		t.Fatalf("no compaction after ~900 KiB of log over ~5 KiB of live data: %+v", st)
	}
	if logs := logFiles(t, dir); len(logs) > 2 {
		t.Fatalf("old logs left behind: %v", logs)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshot")); err != nil {
		t.Fatalf("no snapshot: %v", err)
	}
	check := func(s Store) {
		t.Helper()
		recs := load(t, s, "k")
		if len(recs) != 20 {
			t.Fatalf("%d records, want 20", len(recs))
		}
		for _, r := range recs {
			if !strings.HasPrefix(r.value, "199-") {
				t.Fatalf("record %s = %.10s..., want the last round's", r.key, r.value)
			}
		}
		wantRecords(t, s, "gone", record{"199", "x"})
	}
	s = openEmbedded(t, dir, opts)
	check(s)
	s.Close()

	// A compaction interrupted after its new log was started but before
	// the snapshot was renamed into place: a stale temp file, and the
	// older logs still there.
	os.WriteFile(filepath.Join(dir, "snapshot.tmp"), []byte("half a snapshot"), 0o644)
	logs := logFiles(t, dir)
	last := logs[len(logs)-1]
	var gen uint64
	fmt.Sscanf(filepath.Base(last), "log.%x", &gen)
	os.WriteFile(filepath.Join(dir, logName(gen+1)), nil, 0o644)
	s = openEmbedded(t, dir, opts)
	check(s)
	apply(t, s, put("gone", "after", "y"))
	s.Close()
	s = openEmbedded(t, dir, opts)
	wantRecords(t, s, "gone", record{"199", "x"}, record{"after", "y"})
	s.Close()

	// A damaged snapshot is an error, not a silent loss.
	snap := filepath.Join(dir, "snapshot")
	b, _ := os.ReadFile(snap)
	b[len(b)/2] ^= 1
	os.WriteFile(snap, b, 0o644)
	if s, err := OpenEmbedded(dir); err == nil {
		s.Close()
		t.Fatal("OpenEmbedded succeeded over a damaged snapshot")
	} else if !strings.Contains(err.Error(), "snapshot") {
		t.Fatalf("unclear error: %v", err)
	}
}

func TestEmbeddedOneProcessAtATime(t *testing.T) {
	dir := t.TempDir()
	s := openEmbedded(t, dir, EmbeddedOptions{})
	if s2, err := OpenEmbedded(dir); err == nil {
		s2.Close()
		t.Fatal("a second OpenEmbedded on the same directory succeeded")
	}
	s.Close()
	s = openEmbedded(t, dir, EmbeddedOptions{})
	s.Close()
}

func TestEmbeddedApplyAfterCloseRacesNothing(t *testing.T) {
	s := openEmbedded(t, t.TempDir(), EmbeddedOptions{})
	done := make(chan error, 20)
	for i := 0; i < 20; i++ {
		go func() { done <- s.Apply(context.Background(), []Mutation{put("k", fmt.Sprint(i), "v")}) }()
	}
	s.Close()
	for i := 0; i < 20; i++ {
		if err := <-done; err != nil && err != ErrClosed {
			t.Fatalf("Apply racing Close: %v", err)
		}
	}
}
