package statestore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/recordlog"
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
// returns the log's length after each (its records: the file also holds
// preallocated zeros).
func writeRecords(t *testing.T, dir string, n int) []int64 {
	t.Helper()
	s := openEmbedded(t, dir, EmbeddedOptions{})
	var sizes []int64
	for i := 0; i < n; i++ {
		apply(t, s, put("k", fmt.Sprintf("key%02d", i), fmt.Sprintf("v%d-%s", i, strings.Repeat("p", 50))))
		sizes = append(sizes, s.Stats().LogBytes)
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

	// A header cut short, at the end of the file.
	s = openEmbedded(t, dir, EmbeddedOptions{})
	intact := s.Stats().LogBytes
	s.Close()
	if err := os.Truncate(log, intact); err != nil { // drop the zeros
		t.Fatal(err)
	}
	f, _ = os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{1, 2, 3})
	f.Close()
	s = openEmbedded(t, dir, EmbeddedOptions{})
	if n := len(load(t, s, "k")); n != 6 {
		t.Fatalf("after a short header: %d records, want 6", n)
	}
	if got := s.Stats().LogBytes; got != intact {
		t.Fatalf("%d bytes of records after a short header, want %d", got, intact)
	}
	s.Close()
	// The three bytes were cut off: past the records there are only the
	// zeros written again since.
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !recordlog.AllZero(b[intact:]) {
		t.Fatalf("the torn tail was not cut off: %q follows the records", b[intact:min(len(b), int(intact)+8)])
	}
}

// TestEmbeddedPreallocatedZeros: the log is kept longer than its records
// by zeros written ahead (commits then overwrite them and need only
// fdatasync); the zeros are the log's end on replay, also in an older log
// a compaction left behind, and a torn record among them is cut off.
func TestEmbeddedPreallocatedZeros(t *testing.T) {
	dir := t.TempDir()
	s := openEmbedded(t, dir, EmbeddedOptions{})
	for i := 0; i < 200; i++ {
		apply(t, s, put("k", fmt.Sprintf("key%03d", i), strings.Repeat("v", 100)))
	}
	records := s.Stats().LogBytes
	s.Close() // waits for a running extension
	log := logFiles(t, dir)[0]
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) < records+2<<20 || !recordlog.AllZero(b[records:]) {
		t.Fatalf("log of %d bytes for %d bytes of records: want at least %d zeros after them (half of recordlog's preallocation chunk)", len(b), records, 2<<20)
	}

	// Reopen: all 200 come back, and new commits go into the zeros
	// (the file does not grow).
	s = openEmbedded(t, dir, EmbeddedOptions{})
	if n := len(load(t, s, "k")); n != 200 {
		t.Fatalf("after reopening: %d records, want 200", n)
	}
	apply(t, s, put("k", "next", "x"))
	s.Close()
	if fi, _ := os.Stat(log); fi.Size() != int64(len(b)) {
		t.Errorf("a commit into the zeros changed the file from %d to %d bytes", len(b), fi.Size())
	}

	// An older log with zeros at its end (a compaction started the next
	// log and stopped before its snapshot): not damage.
	older := filepath.Join(dir, logName(1))
	newer := filepath.Join(dir, logName(2))
	if filepath.Base(log) != filepath.Base(older) {
		t.Fatalf("the first log is %s, want %s", log, older)
	}
	if err := os.WriteFile(newer, append(appendRecord(nil, 202, []Mutation{put("k", "in-newer", "y")}), make([]byte, 4096)...), 0o644); err != nil {
		t.Fatal(err)
	}
	s = openEmbedded(t, dir, EmbeddedOptions{})
	if n := len(load(t, s, "k")); n != 202 {
		t.Fatalf("two logs with zero tails: %d records, want 202", n)
	}
	s.Close()

	// A record torn among the zeros of the newest log is cut off.
	nb, err := os.ReadFile(newer)
	if err != nil {
		t.Fatal(err)
	}
	recLen := len(appendRecord(nil, 202, []Mutation{put("k", "in-newer", "y")}))
	torn := appendRecord(nil, 203, []Mutation{put("k", "torn", strings.Repeat("t", 200))})
	for i := recLen; i < len(nb); i++ { // only the zeros: drop what reopening appended
		nb[i] = 0
	}
	copy(nb[recLen:], torn[:len(torn)/2])
	if err := os.WriteFile(newer, nb, 0o644); err != nil {
		t.Fatal(err)
	}
	s = openEmbedded(t, dir, EmbeddedOptions{})
	got := load(t, s, "k")
	if len(got) != 202 {
		t.Fatalf("after a torn record among the zeros: %d records, want 202", len(got))
	}
	apply(t, s, put("k", "after-torn", "z"))
	s.Close()
	s = openEmbedded(t, dir, EmbeddedOptions{})
	if n := len(load(t, s, "k")); n != 203 {
		t.Fatalf("a commit after the torn record: %d records, want 203", n)
	}
	s.Close()
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
