package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/recordlog"
)

// frame wraps payload in a record header with its length and checksum.
func frame(payload []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	crc := crc32.Update(crc32.Checksum(b, castagnoli), castagnoli, payload)
	b = binary.LittleEndian.AppendUint32(b, crc)
	return append(b, payload...)
}

// FuzzDecodeRecord feeds arbitrary bytes, as a damaged disk could hold, to
// the record decoder and to log replay: they must return errors, never
// panic, and whatever decodes must survive a round trip. The bytes are
// tried as they are and as a payload in a frame with a correct length and
// checksum, so the payload parser is reached too.
//
//	go test -run '^$' -fuzz FuzzDecodeRecord -fuzztime 30s ./internal/statestore/
func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, 1, []Mutation{put("task", "a", "value"), del("op", "b")}))
	f.Add(appendRecord(appendRecord(nil, 1, []Mutation{put("k", "", "")}), 2, []Mutation{put("k", "x", "y")}))
	f.Add(appendRecord(nil, ^uint64(0), nil))
	f.Add(appendRecord(nil, 7, []Mutation{put("task", "a", "value"), del("op", "b")})[recordHeader:])
	f.Add(appendRecordFrom(appendRecord(nil, 1, []Mutation{put("k", "a", "1")}), 2, 1, []Mutation{put("k", "a", "1"), del("k", "b")}))
	damaged := appendRecordFrom(appendRecord(nil, 1, []Mutation{put("k", "a", "1")}), 2, 1, []Mutation{put("k", "a", "1"), put("k", "b", "2")})
	damaged[recordHeader+3] ^= 1
	f.Add(damaged)
	f.Add([]byte{})
	f.Add(make([]byte, 64))
	f.Add([]byte{9, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, data := range [][]byte{b, frame(b)} {
			seq, from, muts, n, err := decodeRecord(data)
			if err != nil {
				continue
			}
			if n < recordHeader || n > len(data) || from > seq {
				t.Fatalf("decoded length %d of %d bytes, seq %d from %d", n, len(data), seq, from)
			}
			seq2, from2, muts2, _, err := decodeRecord(appendRecordFrom(nil, seq, from, muts))
			if err != nil || seq2 != seq || from2 != from || len(muts2) != len(muts) {
				t.Fatalf("round trip: %v", err)
			}
			for i := range muts {
				m, m2 := muts[i], muts2[i]
				if m.Kind != m2.Kind || m.Key != m2.Key || m.Delete != m2.Delete || !bytes.Equal(m.Value, m2.Value) {
					t.Fatalf("round trip changed mutation %d: %+v, %+v", i, m, m2)
				}
			}
			// Where the store finds each value again: in the decoded
			// record (refsIn) and in the one it encodes (appendRecordAt).
			enc, at := appendRecordAt(nil, seq, from, muts, nil)
			for i, r := range refsIn(0, 100, data, muts) {
				m := muts[i]
				if m.Delete || len(m.Value) == 0 {
					continue
				}
				if got := data[r.off-100 : r.off-100+int64(r.n)]; !bytes.Equal(got, m.Value) {
					t.Fatalf("mutation %d's value is not where refsIn says: %q, want %q", i, got, m.Value)
				}
				if got := enc[at[i] : at[i]+len(m.Value)]; !bytes.Equal(got, m.Value) {
					t.Fatalf("mutation %d's value is not where appendRecordAt says: %q, want %q", i, got, m.Value)
				}
			}
		}
		// Replay stops at the first bad record, wherever it is, or at
		// the preallocated zeros that end a log, having applied only
		// records that decode and are in sequence.
		s := &Embedded{data: map[string]map[string]valueRef{}, seq: 1}
		tail, err := recordlog.ReplayCovering(bytes.NewReader(b), int64(len(b)), logFormat{}, true, s.coveredBy, s.replayRecord)
		var seqErr *seqError
		if err != nil && !errors.As(err, &seqErr) {
			t.Fatalf("replay: %v", err)
		}
		if tail.End > int64(len(b)) || (err == nil && !tail.Whole(true) && tail.Reason == "") {
			t.Fatalf("replay stopped at %d of %d bytes without a reason (%+v)", tail.End, len(b), tail)
		}
		var off int64
		covered := tail.Covered
		for seq := uint64(1); seq < s.seq; seq++ {
			if len(covered) > 0 && covered[0] == off {
				// Damaged, and the next record (checked below) repeats it.
				n, ok := logFormat{}.Frame(b[off:min(int64(len(b)), off+recordHeader)])
				if !ok {
					t.Fatalf("covered record %d at offset %d has no header", seq, off)
				}
				covered = covered[1:]
				off += n
				if _, from, _, _, derr := decodeRecord(b[off:]); derr != nil || from > seq {
					t.Fatalf("the record after covered record %d does not repeat it: %v", seq, derr)
				}
				continue
			}
			rseq, _, _, n, derr := decodeRecord(b[off:])
			if derr != nil || rseq != seq {
				t.Fatalf("replay applied record %d, which does not decode at offset %d: %v", seq, off, derr)
			}
			off += int64(n)
		}
		if len(covered) != 0 {
			t.Fatalf("covered offsets %v not met", covered)
		}
		if off != tail.End {
			t.Fatalf("replay applied records up to %d, ended at %d", off, tail.End)
		}
	})
}

// FuzzRedactDSN: redactDSN and parseDSN's errors never show a password
// (marked "Zq9" at both ends) put into an address as a URL's user
// information, a URL query value or a quoted key=value value, and no
// input makes them panic.
//
//	go test -run '^$' -fuzz FuzzRedactDSN -fuzztime 30s ./internal/statestore/
func FuzzRedactDSN(f *testing.F) {
	for _, s := range []string{"pw", "p@ss", "a:b@c/d?e#f", "se cret", "it's", `back\slash`, "x&password=y", "", "%40", "host=h port=1", "@@@", "'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		redactDSN(s)
		scrubSecrets(s, s)
		pw := "Zq9" + s + "Zq9"
		kv := strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(pw)
		for _, dsn := range []string{
			"postgres://gantry:" + pw + "@db.invalid/gantry",
			"postgres://gantry:" + pw + "@db.invalid:99999/gantry",
			"postgres://db.invalid/gantry?sslmode=bogus&password=" + pw,
			"host=db.invalid password='" + kv + "' port=x",
		} {
			if r := redactDSN(dsn); strings.Contains(r, pw) {
				t.Fatalf("redactDSN(%q) = %q shows the password", dsn, r)
			}
			// Only without '=': a password could otherwise add keys that
			// make pgx read files (sslrootcert=/dev/zero).
			if strings.Contains(s, "=") {
				continue
			}
			if _, err := parseDSN(dsn); err != nil && strings.Contains(err.Error(), pw) {
				t.Fatalf("parseDSN(%q): %v shows the password", dsn, err)
			}
		}
	})
}
