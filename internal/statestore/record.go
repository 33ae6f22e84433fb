package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"unicode/utf8"
)

// MaxBatchBytes bounds the encoded size of one Apply batch (kinds, keys and
// values together), in every backend.
const MaxBatchBytes = 64 << 20

// validate checks a batch against the rules every backend shares: a kind
// is non-empty, kinds and keys are valid UTF-8 without NUL bytes (they are
// PostgreSQL text), and the batch is at most MaxBatchBytes.
func validate(batch []Mutation) error {
	var size int
	for i, m := range batch {
		if m.Kind == "" {
			return fmt.Errorf("statestore: mutation %d has an empty kind", i)
		}
		if !validText(m.Kind) || !validText(m.Key) {
			return fmt.Errorf("statestore: mutation %d: kind and key must be UTF-8 without NUL bytes", i)
		}
		size += mutationSize(m)
		if size > MaxBatchBytes {
			return fmt.Errorf("statestore: batch is larger than %d bytes", MaxBatchBytes)
		}
	}
	return nil
}

func validText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return false
		}
	}
	return utf8.ValidString(s)
}

// mutationSize is an upper bound of a mutation's encoded size.
func mutationSize(m Mutation) int {
	return 1 + 3*binary.MaxVarintLen64 + len(m.Kind) + len(m.Key) + len(m.Value)
}

// The embedded store's on-disk record:
//
//	length  uint32 LE  bytes of payload
//	crc     uint32 LE  CRC-32C of the length field and the payload
//	payload            seq uint64 LE, [from uint64 LE,] count uvarint,
//	                   then count mutations: op byte (0 put, 1 delete),
//	                   kind, key, value (each uvarint length + bytes; a
//	                   delete has no value)
//
// One group commit is one record, written with one write and made durable
// with one fdatasync. The committer starts the next record's flush
// without waiting for the previous one's (overlap.go), so a crash can tear
// the last two records, and the older can reach the disk torn while the
// newer is intact. A record written while its predecessor's flush runs
// therefore carries the predecessor's mutations too (before its own) and
// says so: its seq field has coverFlag set and from follows, the sequence
// number of the first record whose mutations it repeats. A replay that
// meets a damaged record followed by an intact one covering it applies the
// latter and loses nothing; applying mutations again is harmless (each
// sets a key to a value or removes it, in order). A binary from before
// covering records reads one as out of sequence and refuses to start
// rather than dropping it.
const (
	// coverFlag marks a record that repeats its predecessors' mutations.
	// Sequence numbers never reach it; the snapshot's trailer (all ones)
	// is told apart by value.
	coverFlag  = 1 << 63
	trailerSeq = ^uint64(0)

	recordHeader = 8
	// maxRecord bounds a record's payload: a length beyond it is damage.
	maxRecord = MaxBatchBytes + 1<<20
	opPut     = 0
	opDelete  = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errShort means the buffer ends before the record does: a torn tail.
var errShort = errors.New("record extends past the end of the data")

// appendRecord appends one record holding muts, with sequence number seq.
func appendRecord(dst []byte, seq uint64, muts []Mutation) []byte {
	return appendRecordFrom(dst, seq, seq, muts)
}

// appendRecordFrom appends record seq holding muts, which repeat the
// mutations of records from to seq-1 before its own (from == seq: none).
func appendRecordFrom(dst []byte, seq, from uint64, muts []Mutation) []byte {
	dst, _ = appendRecordAt(dst, seq, from, muts, nil)
	return dst
}

// appendRecordAt is appendRecordFrom that also appends to at, for each of
// muts, where its value starts in dst (a delete's entry is unused).
func appendRecordAt(dst []byte, seq, from uint64, muts []Mutation, at []int) ([]byte, []int) {
	start := len(dst)
	dst = append(dst, make([]byte, recordHeader)...)
	if from != seq {
		dst = binary.LittleEndian.AppendUint64(dst, seq|coverFlag)
		dst = binary.LittleEndian.AppendUint64(dst, from)
	} else {
		dst = binary.LittleEndian.AppendUint64(dst, seq)
	}
	dst = binary.AppendUvarint(dst, uint64(len(muts)))
	for _, m := range muts {
		if m.Delete {
			dst = append(dst, opDelete)
		} else {
			dst = append(dst, opPut)
		}
		dst = binary.AppendUvarint(dst, uint64(len(m.Kind)))
		dst = append(dst, m.Kind...)
		dst = binary.AppendUvarint(dst, uint64(len(m.Key)))
		dst = append(dst, m.Key...)
		if !m.Delete {
			dst = binary.AppendUvarint(dst, uint64(len(m.Value)))
			at = append(at, len(dst))
			dst = append(dst, m.Value...)
		} else {
			at = append(at, len(dst))
		}
	}
	rec := dst[start:]
	binary.LittleEndian.PutUint32(rec[0:], uint32(len(rec)-recordHeader))
	crc := crc32.Update(crc32.Checksum(rec[0:4], castagnoli), castagnoli, rec[recordHeader:])
	binary.LittleEndian.PutUint32(rec[4:], crc)
	return dst, at
}

// decodeRecord decodes the record at the start of b. It returns the
// record's sequence number, the first sequence number whose mutations it
// holds (seq itself unless it covers its predecessors), its mutations
// (whose Values alias b) and its total length. errShort means b ends
// inside the record; any other error means the bytes are not a record. It
// never panics, whatever b holds.
func decodeRecord(b []byte) (seq, from uint64, muts []Mutation, n int, err error) {
	if len(b) < recordHeader {
		return 0, 0, nil, 0, errShort
	}
	length := binary.LittleEndian.Uint32(b[0:])
	if length < 9 || length > maxRecord {
		return 0, 0, nil, 0, fmt.Errorf("implausible record length %d", length)
	}
	if uint64(len(b)-recordHeader) < uint64(length) {
		return 0, 0, nil, 0, errShort
	}
	n = recordHeader + int(length)
	payload := b[recordHeader:n]
	crc := crc32.Update(crc32.Checksum(b[0:4], castagnoli), castagnoli, payload)
	if crc != binary.LittleEndian.Uint32(b[4:]) {
		return 0, 0, nil, 0, errors.New("record checksum mismatch")
	}
	seq = binary.LittleEndian.Uint64(payload)
	p := payload[8:]
	from = seq
	if seq != trailerSeq && seq&coverFlag != 0 {
		seq &^= coverFlag
		if len(p) < 8 {
			return 0, 0, nil, 0, errors.New("covering record without its first sequence number")
		}
		from = binary.LittleEndian.Uint64(p)
		p = p[8:]
		if from >= seq {
			return 0, 0, nil, 0, fmt.Errorf("record %d claims to cover records from %d", seq, from)
		}
	}
	count, k := binary.Uvarint(p)
	if k <= 0 {
		return 0, 0, nil, 0, errors.New("bad mutation count")
	}
	p = p[k:]
	// Each mutation takes at least 3 bytes: do not trust count for sizing.
	if count > uint64(len(p))/3+1 {
		return 0, 0, nil, 0, errors.New("mutation count larger than the record")
	}
	muts = make([]Mutation, 0, count)
	field := func() ([]byte, bool) {
		l, k := binary.Uvarint(p)
		if k <= 0 || l > uint64(len(p)-k) {
			return nil, false
		}
		f := p[k : k+int(l) : k+int(l)]
		p = p[k+int(l):]
		return f, true
	}
	var lastKind string
	for i := uint64(0); i < count; i++ {
		if len(p) < 1 || p[0] > opDelete {
			return 0, 0, nil, 0, errors.New("bad mutation op")
		}
		m := Mutation{Delete: p[0] == opDelete}
		p = p[1:]
		kind, ok1 := field()
		key, ok2 := field()
		if !ok1 || !ok2 {
			return 0, 0, nil, 0, errors.New("bad mutation kind or key")
		}
		// Consecutive mutations share their kind's string: a snapshot
		// of a million records allocates one per kind, not per record.
		if string(kind) != lastKind {
			lastKind = string(kind)
		}
		m.Kind, m.Key = lastKind, string(key)
		if !m.Delete {
			v, ok := field()
			if !ok {
				return 0, 0, nil, 0, errors.New("bad mutation value")
			}
			m.Value = v
		}
		muts = append(muts, m)
	}
	if len(p) != 0 {
		return 0, 0, nil, 0, errors.New("trailing bytes in record")
	}
	return seq, from, muts, n, nil
}

// logFormat frames the records of the state logs for internal/recordlog.
// Frame accepts any length up to maxRecord (Verify rejects the
// implausible short ones), so that the record after a damaged one can be
// found: damage followed by intact records is refused, not cut off.
type logFormat struct{}

func (logFormat) MaxHeader() int { return recordHeader }

func (logFormat) Frame(hdr []byte) (int64, bool) {
	if len(hdr) < recordHeader {
		return 0, false
	}
	length := binary.LittleEndian.Uint32(hdr)
	return recordHeader + int64(length), length <= maxRecord
}

func (logFormat) Verify(rec []byte) bool {
	return binary.LittleEndian.Uint32(rec) >= 9 &&
		crc32.Update(crc32.Checksum(rec[0:4], castagnoli), castagnoli, rec[recordHeader:]) == binary.LittleEndian.Uint32(rec[4:])
}
