package recordlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// ErrDamaged, returned (or wrapped) by a replay's callback, says that the
// record it was given is no record after all (its checksums match but it
// does not decode): the replay stops there as at a record that failed
// Verify, and the error's text becomes the Tail's Reason.
var ErrDamaged = errors.New("damaged record")

// replayBuffer is the read size of a replay: records are small, so reading
// through them costs less than a seek and a read each.
const replayBuffer = 1 << 20

// Tail describes where a log's intact records end.
type Tail struct {
	// End is the offset after the last intact record; Size is the length
	// of the file.
	End, Size int64
	// Zeros is set when the bytes from End to Size are all zero: the
	// preallocated space after the records (or an extension the file
	// system made durable before the data written into it).
	Zeros bool
	// Reason says why the record at End was not taken ("" at Size).
	Reason string
	// Next is a copy of the intact record that follows a damaged one at
	// End, if there is one: damage followed by intact data is not a torn
	// write, which leaves nothing intact after itself.
	Next []byte
	// Covered are the offsets of damaged records the replay went past
	// because the intact record after each carries what it held (see
	// ReplayCovering).
	Covered []int64
}

// Whole reports whether the file holds nothing but intact records, and
// zeros after them when zeros are allowed.
func (t Tail) Whole(zerosAllowed bool) bool {
	return t.End == t.Size || (zerosAllowed && t.Zeros)
}

// Replay reads the records of r, a file of size bytes, from its start and
// calls fn with the offset and bytes of each intact one; rec is valid only
// during the call. It stops at the first record that is cut short, whose
// header Frame rejects, that fails Verify (when verify is set; otherwise
// only headers are checked, for logs whose records are verified when they
// are read), or that fn rejects with ErrDamaged. An error from fn other
// than ErrDamaged ends the replay with that error; an error reading r ends
// it too; the Tail's End is then the offset of the record it stopped at. Replay never panics, whatever r holds, and never allocates more
// than the file's size for one record.
func Replay(r io.ReaderAt, size int64, format Format, verify bool, fn func(off int64, rec []byte) error) (Tail, error) {
	return ReplayCovering(r, size, format, verify, nil, fn)
}

// ReplayCovering is Replay for a log whose writer lets a record's flush
// overlap the next record's (a record written while its predecessor's
// flush runs carries the predecessor's contents too, so a crash that tears
// the predecessor and keeps the successor loses nothing). When a record
// with a well-formed header is damaged (it fails Verify, or fn rejects it
// with ErrDamaged) and the record after it is intact, covers, if not nil,
// is asked whether that next record carries everything the damaged one
// held; if it says so, the damaged record's offset goes into the Tail's
// Covered and the replay goes on with the next record (fn is called with
// it as usual). covers may keep state: it is called only there, in order.
func ReplayCovering(r io.ReaderAt, size int64, format Format, verify bool, covers func(damagedOff int64, next []byte) bool, fn func(off int64, rec []byte) error) (Tail, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), replayBuffer)
	t := Tail{Size: size}
	var off int64
	var n int64
	for off < size {
		hdr, err := br.Peek(int(min(int64(format.MaxHeader()), size-off)))
		if err != nil {
			t.End = off
			return t, fmt.Errorf("reading %d bytes at offset %d: %w", len(hdr), off, err)
		}
		var ok bool
		n, ok = format.Frame(hdr)
		if !ok {
			t.Reason = "not a record header"
			n = 0
			break
		}
		if n <= 0 || n > size-off {
			t.Reason = fmt.Sprintf("the record of %d bytes runs past the end of the file", n)
			n = 0
			break
		}
		rec, consumed, err := nextRecord(br, n)
		if err != nil {
			t.End = off
			return t, fmt.Errorf("reading the record at offset %d: %w", off, err)
		}
		damage := ""
		if verify && !format.Verify(rec) {
			damage = "checksum mismatch"
		} else if err := fn(off, rec); err != nil {
			if !errors.Is(err, ErrDamaged) {
				t.End = off
				return t, err
			}
			damage = err.Error()
		}
		if damage != "" {
			next, err := coveredBy(r, off, n, size, format, covers)
			if err != nil {
				t.End = off
				return t, err
			}
			if !next {
				t.Reason = damage
				break
			}
			t.Covered = append(t.Covered, off)
		}
		if !consumed {
			if _, err := br.Discard(int(n)); err != nil {
				t.End = off
				return t, fmt.Errorf("reading the record at offset %d: %w", off, err)
			}
		}
		off += n
	}
	t.End = off
	if off == size {
		return t, nil
	}
	var err error
	if t.Zeros, err = allZeroAt(r, off, size); err != nil {
		return t, err
	}
	if n > 0 && !t.Zeros {
		t.Next, err = recordAt(r, off+n, size, format)
	}
	return t, err
}

// coveredBy reports whether the intact record after the damaged one of n
// bytes at off carries what the damaged one held, as covers says.
func coveredBy(r io.ReaderAt, off, n, size int64, format Format, covers func(int64, []byte) bool) (bool, error) {
	if covers == nil {
		return false, nil
	}
	next, err := recordAt(r, off+n, size, format)
	if err != nil || next == nil {
		return false, err
	}
	return covers(off, next), nil
}

// nextRecord returns the next n bytes of br: from its buffer, not yet
// consumed, when they fit in it; else read into a new slice (consumed).
func nextRecord(br *bufio.Reader, n int64) (rec []byte, consumed bool, err error) {
	if n <= int64(br.Size()) {
		rec, err = br.Peek(int(n))
		return rec, false, err
	}
	rec = make([]byte, n)
	_, err = io.ReadFull(br, rec)
	return rec, true, err
}

// recordAt returns a copy of the intact record at off, or nil if there is
// none.
func recordAt(r io.ReaderAt, off, size int64, format Format) ([]byte, error) {
	if off >= size {
		return nil, nil
	}
	hdr := make([]byte, min(int64(format.MaxHeader()), size-off))
	if _, err := r.ReadAt(hdr, off); err != nil {
		return nil, fmt.Errorf("reading offset %d: %w", off, err)
	}
	n, ok := format.Frame(hdr)
	if !ok || n <= 0 || n > size-off {
		return nil, nil
	}
	rec := make([]byte, n)
	if _, err := r.ReadAt(rec, off); err != nil {
		return nil, fmt.Errorf("reading offset %d: %w", off, err)
	}
	if !format.Verify(rec) {
		return nil, nil
	}
	return rec, nil
}

// allZeroAt reports whether bytes [off, size) of r are all zero.
func allZeroAt(r io.ReaderAt, off, size int64) (bool, error) {
	buf := make([]byte, min(size-off, replayBuffer))
	for off < size {
		b := buf[:min(size-off, int64(len(buf)))]
		if _, err := r.ReadAt(b, off); err != nil {
			return false, fmt.Errorf("reading offset %d: %w", off, err)
		}
		if !AllZero(b) {
			return false, nil
		}
		off += int64(len(b))
	}
	return true, nil
}

// AllZero reports whether b holds only zero bytes.
func AllZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
