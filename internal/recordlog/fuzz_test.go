package recordlog

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReplay replays arbitrary bytes (a damaged disk, a torn write) as a
// log, then opens them as Open does at start. Replay must never panic and
// never hand over a record whose checksum does not match; the records it
// takes are contiguous from the start; Open cuts the file to exactly
// those records, and the cut file replays to the same records with
// nothing after them.
//
//	go test -run '^$' -fuzz FuzzReplay -fuzztime 30s ./internal/recordlog/
func FuzzReplay(f *testing.F) {
	f.Add(records("one", "two", "three"))
	f.Add(append(records("one", "two"), record("torn")[:6]...))
	f.Add(append(records("one"), make([]byte, 100)...))
	damaged := records("one", "two", "three")
	damaged[len(record("one"))+9] ^= 1
	f.Add(damaged)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		var got [][]byte
		var next int64
		tail, err := Replay(bytes.NewReader(b), int64(len(b)), testFormat{}, true, func(off int64, rec []byte) error {
			if off != next {
				t.Fatalf("record at %d, want %d", off, next)
			}
			if !(testFormat{}).Verify(rec) {
				t.Fatalf("record at %d fails its checksum: %x", off, rec)
			}
			next += int64(len(rec))
			got = append(got, append([]byte(nil), rec...))
			return nil
		})
		if err != nil {
			t.Fatalf("Replay of bytes in memory: %v", err)
		}
		if tail.End != next || tail.Size != int64(len(b)) || tail.End > tail.Size {
			t.Fatalf("tail %+v after records up to %d of %d bytes", tail, next, len(b))
		}
		if tail.Zeros && !AllZero(b[tail.End:]) {
			t.Fatalf("tail %+v: not all zeros after the records", tail)
		}
		if tail.Next != nil && !(testFormat{}).Verify(tail.Next) {
			t.Fatalf("Next %x fails its checksum", tail.Next)
		}

		path := filepath.Join(dir, "log")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		// Without Preallocate (whose zeros TestPreallocatedLog covers:
		// writing them makes each run too slow to fuzz), zeros after the
		// records are a damaged end too.
		opts := Options{Format: testFormat{}, Verify: true}
		var again [][]byte
		l, err := Open(path, opts, func(off int64, rec []byte) error {
			again = append(again, append([]byte(nil), rec...))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if len(again) != len(got) || l.Size() != tail.End {
			t.Fatalf("Open replayed %d records to %d, Replay %d to %d", len(again), l.Size(), len(got), tail.End)
		}
		cut, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(cut[:tail.End], b[:tail.End]) {
			t.Fatal("Open changed the intact records")
		}
		if len(cut) != int(tail.End) {
			t.Fatalf("Open left %d bytes, want the %d of the records", len(cut), tail.End)
		}
		// The file as Open left it holds the same records and ends clean.
		var third [][]byte
		t2, err := Replay(bytes.NewReader(cut), int64(len(cut)), testFormat{}, true, func(off int64, rec []byte) error {
			third = append(third, append([]byte(nil), rec...))
			return nil
		})
		if err != nil || !t2.Whole(false) || len(third) != len(got) {
			t.Fatalf("after Open: %d records, tail %+v (%v); want %d and a clean end", len(third), t2, err, len(got))
		}
		for i := range got {
			if !bytes.Equal(third[i], got[i]) {
				t.Fatalf("record %d changed by the cut: %x, was %x", i, third[i], got[i])
			}
		}
	})
}
