package recordlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// openLog opens the log at path and returns it with the payloads replayed.
func openLog(t *testing.T, path string, opts Options) (*Log, []string) {
	t.Helper()
	var got []string
	l, err := Open(path, opts, func(off int64, rec []byte) error {
		got = append(got, string(rec[8:]))
		return nil
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, got
}

func appendRecord(t *testing.T, l *Log, payload string) int64 {
	t.Helper()
	rec := record(payload)
	off, err := l.Append(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(off + int64(len(rec))); err != nil {
		t.Fatal(err)
	}
	return off
}

// TestOpenCutsTornTail: a torn record at the end is cut off at open, and
// the next append follows the last intact record.
func TestOpenCutsTornTail(t *testing.T) {
	for _, policy := range []SyncPolicy{NoSync, SyncFile, SyncData} {
		t.Run(fmt.Sprint(policy), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			opts := Options{Format: testFormat{}, Verify: true, Sync: policy}
			intact := records("one", "two")
			if err := os.WriteFile(path, append(append([]byte(nil), intact...), record("torn")[:9]...), 0o644); err != nil {
				t.Fatal(err)
			}
			l, got := openLog(t, path, opts)
			if strings.Join(got, ",") != "one,two" || l.Size() != int64(len(intact)) {
				t.Fatalf("replayed %q, size %d; want one,two and %d", got, l.Size(), len(intact))
			}
			if off := appendRecord(t, l, "three"); off != int64(len(intact)) {
				t.Fatalf("appended at %d, want %d", off, len(intact))
			}
			l.Close()
			b, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(b, records("one", "two", "three")) {
				t.Fatalf("file holds %q (%v)", b, err)
			}
		})
	}
}

// TestOpenDamagedRefuses: the Damaged hook sees the tail and its error
// refuses the open, leaving the file as it was.
func TestOpenDamagedRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	b := records("one", "two", "three")
	b[len(record("one"))+9] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("intact records follow")
	var seen Tail
	_, err := Open(path, Options{Format: testFormat{}, Verify: true, Damaged: func(p string, tail Tail) error {
		seen = tail
		if p != path {
			t.Errorf("Damaged called with %s, want %s", p, path)
		}
		return refuse
	}}, func(int64, []byte) error { return nil })
	if !errors.Is(err, refuse) || seen.End != int64(len(record("one"))) || !bytes.Equal(seen.Next, record("three")) {
		t.Fatalf("Open: %v, tail %+v", err, seen)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
		t.Fatal("a refused open changed the file")
	}
	// Without the hook the damaged end goes.
	l, got := openLog(t, path, Options{Format: testFormat{}, Verify: true})
	if len(got) != 1 || l.Size() != int64(len(record("one"))) {
		t.Fatalf("replayed %q, size %d", got, l.Size())
	}
}

// TestPreallocatedLog: a preallocated log keeps zeros after its records,
// appends overwrite them without growing the file, and a reopen ends at
// them without cutting them off.
func TestPreallocatedLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	opts := Options{Format: testFormat{}, Verify: true, Sync: SyncData, Preallocate: true}
	l, err := Create(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		appendRecord(t, l, fmt.Sprintf("record %d", i))
	}
	size := l.Size()
	l.Close() // waits for a running extension
	info, err := os.Stat(path)
	if err != nil || info.Size() < size+preallocChunk/2 {
		t.Fatalf("file of %d bytes for %d bytes of records (%v): want zeros after them", info.Size(), size, err)
	}
	l, got := openLog(t, path, opts)
	if len(got) != 100 || l.Size() != size {
		t.Fatalf("reopened: %d records, size %d; want 100, %d", len(got), l.Size(), size)
	}
	appendRecord(t, l, "one more")
	l.Close()
	if after, _ := os.Stat(path); after.Size() != info.Size() {
		t.Fatalf("an append into the zeros changed the file from %d to %d bytes", info.Size(), after.Size())
	}
	// Without Preallocate, the zeros are a damaged tail and go.
	l, got = openLog(t, path, Options{Format: testFormat{}, Verify: true})
	if len(got) != 101 {
		t.Fatalf("%d records, want 101", len(got))
	}
	if after, _ := os.Stat(path); after.Size() != l.Size() {
		t.Fatalf("file of %d bytes, records %d: zeros kept without Preallocate", after.Size(), l.Size())
	}
}

// appendConcurrently appends each records from each of goroutines
// goroutines, "r000", "r001" and so on in the order they go into the log,
// each caller syncing its record after its append while the others append
// and sync.
func appendConcurrently(t *testing.T, l *Log, goroutines, each int) {
	t.Helper()
	var mu sync.Mutex // orders the appends and their payloads
	var wg sync.WaitGroup
	n := 0
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				mu.Lock()
				rec := record(fmt.Sprintf("r%03d", n))
				n++
				off, err := l.Append(rec)
				mu.Unlock()
				if err == nil {
					err = l.Sync(off + int64(len(rec)))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestConcurrentAppends: appends and shared syncs from many goroutines
// give contiguous, intact records, all found again at reopen.
func TestConcurrentAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	opts := Options{Format: testFormat{}, Verify: true, Sync: SyncFile}
	l, err := Create(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	appendConcurrently(t, l, 8, 50)
	l.Close()
	_, got := openLog(t, path, opts)
	if len(got) != 400 {
		t.Fatalf("%d records after 400 appends", len(got))
	}
}

// TestOpenCovered: with Options.Covers, a damaged record that the intact
// record after it covers is kept in place and gone past, the records
// after it are replayed, the Damaged hook is not called and appends
// follow the last record; the file is not cut.
func TestOpenCovered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	b := append(records("one", "two", "covers:two,three"), make([]byte, 4096)...)
	b[len(record("one"))+9] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{Format: testFormat{}, Verify: true, Sync: SyncData, Preallocate: true,
		Damaged: func(string, Tail) error { return errors.New("Damaged must not be called") },
		Covers: func(off int64, next []byte) bool {
			return off == int64(len(record("one"))) && strings.HasPrefix(string(next[8:]), "covers:")
		}}
	l, got := openLog(t, path, opts)
	if strings.Join(got, "|") != "one|covers:two,three" || l.Size() != int64(len(records("one", "two", "covers:two,three"))) {
		t.Fatalf("replayed %q, size %d", got, l.Size())
	}
	appendRecord(t, l, "four")
	l.Close()
	l, got = openLog(t, path, opts)
	if strings.Join(got, "|") != "one|covers:two,three|four" {
		t.Fatalf("after an append, replayed %q", got)
	}
	l.Close()
}

// TestOverlappingSyncs: Sync from several goroutines at once (each
// flushing while others do) leaves every record durable and replayable,
// and a Sync for records an ended flush covered returns without one.
func TestOverlappingSyncs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	opts := Options{Format: testFormat{}, Verify: true, Sync: SyncData, Preallocate: true}
	l, _ := openLog(t, path, opts)
	appendConcurrently(t, l, 4, 50)
	if err := l.Sync(1); err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, got := openLog(t, path, opts)
	if len(got) != 200 {
		t.Fatalf("replayed %d records, want 200", len(got))
	}
	for i, p := range got {
		if p != fmt.Sprintf("r%03d", i) {
			t.Fatalf("record %d is %q", i, p)
		}
	}
}
