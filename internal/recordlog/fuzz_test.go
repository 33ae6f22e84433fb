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

		checkCovering(t, b, got)

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

// checkCovering replays b again going past damaged records whose successor's
// payload starts with 'c': it must take the same records up to the first
// damage, each record it takes must be intact, and the records taken and
// the damaged ones gone past must tile the file up to the Tail's End.
func checkCovering(t *testing.T, b []byte, plain [][]byte) {
	var got [][]byte
	var offs []int64
	tail, err := ReplayCovering(bytes.NewReader(b), int64(len(b)), testFormat{}, true, func(off int64, next []byte) bool {
		return len(next) > 8 && next[8] == 'c'
	}, func(off int64, rec []byte) error {
		if !(testFormat{}).Verify(rec) {
			t.Fatalf("record at %d fails its checksum: %x", off, rec)
		}
		got = append(got, append([]byte(nil), rec...))
		offs = append(offs, off)
		return nil
	})
	if err != nil {
		t.Fatalf("ReplayCovering of bytes in memory: %v", err)
	}
	if len(got) < len(plain) {
		t.Fatalf("ReplayCovering took %d records, Replay %d", len(got), len(plain))
	}
	for i := range plain {
		if !bytes.Equal(got[i], plain[i]) {
			t.Fatalf("record %d differs between Replay and ReplayCovering", i)
		}
	}
	if len(plain) == len(got) && tail.Covered != nil {
		t.Fatalf("covered %v but took no more records", tail.Covered)
	}
	var pos int64
	ri, ci := 0, 0
	for pos < tail.End {
		switch {
		case ri < len(offs) && offs[ri] == pos:
			pos += int64(len(got[ri]))
			ri++
		case ci < len(tail.Covered) && tail.Covered[ci] == pos:
			n, ok := testFormat{}.Frame(b[pos:min(int64(len(b)), pos+8)])
			if !ok || n <= 0 || pos+n > int64(len(b)) {
				t.Fatalf("covered offset %d is not a framed record", pos)
			}
			if ri >= len(offs) || offs[ri] != pos+n || got[ri][8] != 'c' {
				t.Fatalf("the record after the covered one at %d was not taken or does not cover it", pos)
			}
			pos += n
			ci++
		default:
			t.Fatalf("offset %d is neither a record taken nor one covered (tail %+v)", pos, tail)
		}
	}
	if pos != tail.End || ri != len(offs) || ci != len(tail.Covered) {
		t.Fatalf("records and covered damage end at %d, tail at %d", pos, tail.End)
	}
}
