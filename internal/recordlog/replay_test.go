package recordlog

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// replayAll replays b and returns the payloads of the records it took.
func replayAll(t *testing.T, b []byte, verify bool) ([]string, Tail) {
	t.Helper()
	var got []string
	var next int64
	tail, err := Replay(bytes.NewReader(b), int64(len(b)), testFormat{}, verify, func(off int64, rec []byte) error {
		if off != next {
			t.Fatalf("record at %d, want %d (records are contiguous)", off, next)
		}
		next += int64(len(rec))
		got = append(got, string(rec[8:]))
		return nil
	})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if tail.End != next {
		t.Fatalf("Replay ended at %d after records up to %d", tail.End, next)
	}
	return got, tail
}

func TestReplayStopsAtTornRecord(t *testing.T) {
	whole := records("one", "two", "three")
	torn := append(append([]byte(nil), whole...), record("four, cut short")[:10]...)
	got, tail := replayAll(t, torn, true)
	if strings.Join(got, ",") != "one,two,three" || tail.End != int64(len(whole)) || tail.Size != int64(len(torn)) {
		t.Fatalf("got %q, %+v; want three records ending at %d", got, tail, len(whole))
	}
	if tail.Whole(true) || tail.Zeros || tail.Next != nil || tail.Reason == "" {
		t.Fatalf("a torn tail reads as %+v", tail)
	}
	// A header cut short, and the intact log.
	for _, b := range [][]byte{append(append([]byte(nil), whole...), 5, 0, 0), whole} {
		got, tail := replayAll(t, b, true)
		if len(got) != 3 || tail.End != int64(len(whole)) {
			t.Fatalf("got %q ending at %d, want three records ending at %d", got, tail.End, len(whole))
		}
	}
}

// TestReplayVerify: with verify, a record whose data fails its checksum
// ends the replay; without, only headers are checked and it is taken.
func TestReplayVerify(t *testing.T) {
	b := records("one", "two", "three")
	b[len(record("one"))+9] ^= 1 // in "two"'s payload
	if got, tail := replayAll(t, b, true); len(got) != 1 || tail.Reason != "checksum mismatch" {
		t.Fatalf("verified replay of a damaged second record: %q, %+v", got, tail)
	}
	if got, tail := replayAll(t, b, false); len(got) != 3 || !tail.Whole(false) {
		t.Fatalf("header-only replay: %q, %+v", got, tail)
	}
}

// TestReplayNextIntact: damage followed by an intact record is reported
// with that record (not a torn write); damage followed by junk is not.
func TestReplayNextIntact(t *testing.T) {
	b := records("one", "two", "three")
	b[len(record("one"))+9] ^= 1
	_, tail := replayAll(t, b, true)
	if !bytes.Equal(tail.Next, record("three")) {
		t.Fatalf("Next = %q, want the record of \"three\"", tail.Next)
	}
	b = append(records("one", "two"), "junk after the damage"...)
	b[len(record("one"))+9] ^= 1
	if _, tail := replayAll(t, b, true); tail.Next != nil {
		t.Fatalf("Next = %q after junk", tail.Next)
	}
}

func TestReplayZeros(t *testing.T) {
	b := append(records("one", "two"), make([]byte, 3<<20)...)
	got, tail := replayAll(t, b, true)
	if len(got) != 2 || !tail.Zeros || !tail.Whole(true) || tail.Whole(false) {
		t.Fatalf("records then zeros: %q, %+v", got, tail)
	}
	b[len(b)-1] = 1
	if _, tail := replayAll(t, b, true); tail.Zeros {
		t.Fatalf("a non-zero byte at the end reads as zeros: %+v", tail)
	}
}

// TestReplayLargeRecords: records longer than the read buffer are read
// whole, and the records after them are found.
func TestReplayLargeRecords(t *testing.T) {
	big := strings.Repeat("b", replayBuffer+100)
	got, tail := replayAll(t, records("one", big, "two", big), true)
	if len(got) != 4 || got[1] != big || got[2] != "two" || !tail.Whole(false) {
		t.Fatalf("got %d records, %+v", len(got), tail)
	}
}

// TestReplayCallbackErrors: ErrDamaged stops the replay at that record,
// with its text as the reason; another error ends it with that error.
func TestReplayCallbackErrors(t *testing.T) {
	b := records("one", "bad", "three")
	tail, err := Replay(bytes.NewReader(b), int64(len(b)), testFormat{}, true, func(off int64, rec []byte) error {
		if string(rec[8:]) == "bad" {
			return fmt.Errorf("%w: no good", ErrDamaged)
		}
		return nil
	})
	if err != nil || tail.End != int64(len(record("one"))) || !strings.Contains(tail.Reason, "no good") || !bytes.Equal(tail.Next, record("three")) {
		t.Fatalf("ErrDamaged: %+v, %v", tail, err)
	}
	stop := errors.New("stop")
	tail, err = Replay(bytes.NewReader(b), int64(len(b)), testFormat{}, true, func(off int64, rec []byte) error {
		if string(rec[8:]) == "bad" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || tail.End != int64(len(record("one"))) {
		t.Fatalf("an error from the callback: %+v, %v", tail, err)
	}
}

// TestReplayCovering: a damaged record whose successor covers it (here:
// the successor's payload starts with "covers:") is gone past, with its
// offset in Covered, and the records after it are replayed; a damaged
// record its successor does not cover, or with nothing intact after it,
// still ends the replay.
func TestReplayCovering(t *testing.T) {
	covers := func(asked *[]int64) func(int64, []byte) bool {
		return func(off int64, next []byte) bool {
			*asked = append(*asked, off)
			return strings.HasPrefix(string(next[8:]), "covers:")
		}
	}
	replay := func(b []byte, asked *[]int64) ([]string, Tail) {
		var got []string
		tail, err := ReplayCovering(bytes.NewReader(b), int64(len(b)), testFormat{}, true, covers(asked), func(off int64, rec []byte) error {
			got = append(got, string(rec[8:]))
			return nil
		})
		if err != nil {
			t.Fatalf("ReplayCovering: %v", err)
		}
		return got, tail
	}
	one := len(record("one"))
	b := records("one", "two", "covers:two,three", "four")
	b[one+9] ^= 1 // "two" damaged
	var asked []int64
	got, tail := replay(b, &asked)
	if strings.Join(got, "|") != "one|covers:two,three|four" || !tail.Whole(false) || len(tail.Covered) != 1 || tail.Covered[0] != int64(one) {
		t.Fatalf("covered damage: got %q, %+v", got, tail)
	}
	if len(asked) != 1 || asked[0] != int64(one) {
		t.Fatalf("covers was asked about %v, want [%d]", asked, one)
	}

	// Not covered: the replay ends at the damage, as Replay does.
	b = records("one", "two", "three", "four")
	b[one+9] ^= 1
	asked = nil
	got, tail = replay(b, &asked)
	if strings.Join(got, "|") != "one" || tail.End != int64(one) || tail.Covered != nil || !bytes.Equal(tail.Next, record("three")) || len(asked) != 1 {
		t.Fatalf("uncovered damage: got %q, %+v (asked %v)", got, tail, asked)
	}

	// A torn last record: nothing intact after it, covers is not asked.
	b = append(records("one", "two"), record("covers:three")[:9]...)
	asked = nil
	got, tail = replay(b, &asked)
	if len(got) != 2 || tail.End != int64(len(records("one", "two"))) || len(asked) != 0 {
		t.Fatalf("torn tail: got %q, %+v (asked %v)", got, tail, asked)
	}

	// A record the callback rejects as damaged is covered the same way.
	b = records("one", "bad", "covers:bad,three")
	var got2 []string
	tail, err := ReplayCovering(bytes.NewReader(b), int64(len(b)), testFormat{}, true, covers(new([]int64)), func(off int64, rec []byte) error {
		if string(rec[8:]) == "bad" {
			return fmt.Errorf("%w: no good", ErrDamaged)
		}
		got2 = append(got2, string(rec[8:]))
		return nil
	})
	if err != nil || strings.Join(got2, "|") != "one|covers:bad,three" || !tail.Whole(false) || len(tail.Covered) != 1 {
		t.Fatalf("callback damage: got %q, %+v, %v", got2, tail, err)
	}
}
