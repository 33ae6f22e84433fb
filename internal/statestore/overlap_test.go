package statestore

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// logRecord is one record of a state log file as written.
type logRecord struct {
	off, n    int64
	seq, from uint64
	muts      []Mutation
}

// readLog decodes the records of a log file up to its zeros.
func readLog(t *testing.T, path string) ([]byte, []logRecord) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []logRecord
	for off := 0; off < len(b); {
		seq, from, muts, n, err := decodeRecord(b[off:])
		if err != nil {
			break
		}
		recs = append(recs, logRecord{off: int64(off), n: int64(n), seq: seq, from: from, muts: muts})
		off += n
	}
	return b, recs
}

// applyConcurrently applies rounds batches from each of workers
// goroutines, each batch putting its goroutine's key to the round.
// Fewer workers than gatherAfter keep every group below it, so that the
// committer never gathers and records overlap as often as the disk lets
// them (a gathering of 1 ms outlasts a flush of this machine's disks).
const overlapWorkers = gatherAfter - 1

func applyConcurrently(t *testing.T, s *Embedded, workers, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				err := s.Apply(context.Background(), []Mutation{put("k", fmt.Sprintf("w%02d", w), fmt.Sprint(r)), put("r", fmt.Sprintf("w%02d-%d", w, r), "x")})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestOverlappedCommitsCoverTheirPredecessor: under concurrent Apply the
// committer writes records while the previous one's flush runs, and each
// such record repeats its predecessor's mutations, names it as the first
// it covers, and is the record right after it; every record is in
// sequence, and the store reopens with every batch.
func TestOverlappedCommitsCoverTheirPredecessor(t *testing.T) {
	dir := t.TempDir()
	s := openEmbedded(t, dir, EmbeddedOptions{})
	applyConcurrently(t, s, overlapWorkers, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, recs := readLog(t, logFiles(t, dir)[0])
	covering := 0
	for i, r := range recs {
		if r.seq != uint64(i+1) {
			t.Fatalf("record %d has sequence number %d", i, r.seq)
		}
		if r.from == r.seq {
			continue
		}
		covering++
		prev := recs[i-1]
		if r.from != prev.seq {
			t.Fatalf("record %d covers from %d, want its predecessor %d", r.seq, r.from, prev.seq)
		}
		// The predecessor's own mutations, after those it repeats.
		own := prev.muts[ownStart(recs, i-1):]
		if len(r.muts) <= len(own) {
			t.Fatalf("record %d holds %d mutations, fewer than its predecessor's own %d", r.seq, len(r.muts), len(own))
		}
		for j, m := range own {
			if m.Kind != r.muts[j].Kind || m.Key != r.muts[j].Key || string(m.Value) != string(r.muts[j].Value) {
				t.Fatalf("record %d does not start with its predecessor's mutations: %d is %+v, want %+v", r.seq, j, r.muts[j], m)
			}
		}
	}
	if covering == 0 {
		t.Fatalf("none of %d records was written while another's flush ran", len(recs))
	}
	t.Logf("%d records, %d written while the previous one's flush ran", len(recs), covering)
	s = openEmbedded(t, dir, EmbeddedOptions{})
	if n := len(load(t, s, "r")); n != overlapWorkers*100 {
		t.Fatalf("reopened with %d batches, want %d", n, overlapWorkers*100)
	}
}

// ownStart is the number of repeated mutations at the start of recs[i]:
// those of its predecessor's own, when it covers it.
func ownStart(recs []logRecord, i int) int {
	if i < 0 || recs[i].from == recs[i].seq {
		return 0
	}
	prev := recs[i-1]
	return len(prev.muts) - ownStart(recs, i-1)
}

// TestCrashBetweenOverlappedFlushes: a crash with two flushes in flight
// can leave the older record torn and the newer intact. For each covering
// record the pipeline wrote, the log is cut after it and its predecessor
// damaged: the store must open, hold every mutation of both records and
// take new commits after them; a damaged record the next one does not
// cover is still refused as corruption.
func TestCrashBetweenOverlappedFlushes(t *testing.T) {
	src := t.TempDir()
	s := openEmbedded(t, src, EmbeddedOptions{})
	applyConcurrently(t, s, overlapWorkers, 40)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, recs := readLog(t, logFiles(t, src)[0])
	tried := 0
	for i := 1; i < len(recs) && tried < 5; i++ {
		if recs[i].from == recs[i].seq {
			continue
		}
		tried++
		prev, cur := recs[i-1], recs[i]
		crashed := append([]byte(nil), b[:cur.off+cur.n]...)
		crashed = append(crashed, make([]byte, 4096)...)
		crashed[prev.off+prev.n-1] ^= 0xff // the older record's last byte: a torn write
		dir := t.TempDir()
		if err := os.WriteFile(dir+"/"+logName(1), crashed, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := OpenEmbedded(dir)
		if err != nil {
			t.Fatalf("record %d torn, %d intact and covering it: %v", prev.seq, cur.seq, err)
		}
		// The state is that of applying every record up to cur in order.
		want := map[string]string{}
		for _, r := range recs[:i+1] {
			for _, m := range r.muts {
				if m.Kind == "r" {
					want[m.Key] = string(m.Value)
				}
			}
		}
		got := map[string]bool{}
		for _, r := range load(t, s, "r") {
			got[r.key] = true
		}
		if len(got) != len(want) {
			t.Fatalf("record %d torn: %d batches after reopening, want %d", prev.seq, len(got), len(want))
		}
		for _, m := range prev.muts[ownStart(recs, i-1):] {
			if m.Kind == "r" && !got[m.Key] {
				t.Fatalf("record %d torn: its batch %s is lost", prev.seq, m.Key)
			}
		}
		apply(t, s, put("r", "after", "x"))
		s.Close()
		s = openEmbedded(t, dir, EmbeddedOptions{})
		if n := len(load(t, s, "r")); n != len(want)+1 {
			t.Fatalf("a commit after the recovery: %d batches, want %d", n, len(want)+1)
		}
		s.Close()

		// The same damage with a successor that does not cover it.
		plain := append([]byte(nil), crashed[:cur.off]...)
		plain = appendRecord(plain, cur.seq, cur.muts[len(cur.muts)-1:])
		plain = append(plain, make([]byte, 4096)...)
		dir = t.TempDir()
		if err := os.WriteFile(dir+"/"+logName(1), plain, 0o644); err != nil {
			t.Fatal(err)
		}
		if s, err := OpenEmbedded(dir); err == nil {
			s.Close()
			t.Fatalf("record %d damaged, %d intact but not covering it: opened", prev.seq, cur.seq)
		} else if !strings.Contains(err.Error(), "intact records follow") {
			t.Fatalf("unclear error: %v", err)
		}
	}
	if tried == 0 {
		t.Fatalf("none of %d records was written while another's flush ran", len(recs))
	}
}
