package blobstore

// The pack store: small blobs appended as records to segment files.
//
// Creating a file costs 40-200 µs of kernel CPU on the file systems Gantry
// runs on, far more than writing a small blob, so blobs up to
// DiskOptions.PackThreshold are not given a file each. They are appended as
// records to segment files, packs/{id}.seg (ids in hex, increasing), of
// about DiskOptions.SegmentSize bytes. One segment at a time, the current
// one, takes appends; the others are sealed and never written again. A
// record is
//
//	offset  size  field
//	0       4     magic "GPK1"
//	4       1     digest function (REAPI enum value)
//	5       1     hash length in bytes (n)
//	6       2     zero
//	8       4     blob size (little endian, as all integers)
//	12      4     CRC-32C (Castagnoli) of the data
//	16      n     hash, binary
//	16+n    4     CRC-32C of bytes 0..16+n (the header)
//	20+n    size  data
//
// and is written with one positioned write(2). A segment is a
// recordlog.Log (internal/recordlog) framed by packFormat. The index says
// where each blob is: its own file, or (segment, record offset).
//
// At start the index is rebuilt by scanning the records of every segment:
// headers are checked (magic, header CRC, digest function, hash length)
// and the data skipped, except in the newest segment, the only one that
// can have been cut short by a crash, whose data CRCs are checked as well.
// The full hash is not recomputed at start. A record that fails a check,
// or runs past the end of the file, truncates its segment there: what
// follows a torn or damaged record cannot be trusted to be aligned.
//
// Every read of a packed blob reads the whole record (at most
// PackThreshold bytes) and checks the header against the digest and the
// CRC of the data: a mismatch drops the blob from the index and the read
// returns ErrNotFound, so damage on disk shows up as a missing blob that
// clients upload again, never as wrong bytes.
//
// Segments are reference counted: the store holds one reference while the
// segment is live, and every read or append holds one while it uses the
// file. Evicting a segment drops the store's reference; the last one to
// go closes the file and unlinks it, so a read that raced the eviction
// reads the old, intact file and returns the data.

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/recordlog"
)

const (
	// DefaultPackThreshold is the size up to which blobs are packed into
	// segments when DiskOptions.PackThreshold is 0.
	defaultPackThreshold = 64 << 10
	// DefaultSegmentSize is the size of a segment when
	// DiskOptions.SegmentSize is 0.
	defaultSegmentSize = 64 << 20
	// minSegmentsPerBound: a segment is at most this fraction of MaxBytes,
	// so that evicting a whole segment frees a small part of the store.
	minSegmentsPerBound = 16

	recMagic     = "GPK1"
	recFixedHdr  = 16
	maxHashBytes = 64
	segSuffix    = ".seg"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segment is one pack file.
type segment struct {
	id  uint64
	log *recordlog.Log
	// entries are the index entries that were placed in this segment
	// (under Disk.mu); those that moved or left the index are skipped.
	entries []*entry
	// dead is set under Disk.mu when the segment leaves the store.
	dead bool
	refs atomic.Int32
}

// unref drops a reference; the last one closes and unlinks the file.
func (g *segment) unref() {
	if g.refs.Add(-1) == 0 {
		g.log.Close()
		os.Remove(g.log.Path())
	}
}

func segmentName(id uint64) string { return fmt.Sprintf("%016x%s", id, segSuffix) }

// recordHeaderLen is the length of the header of a record of d.
func recordHeaderLen(d digest.Digest) int64 { return recFixedHdr + int64(len(d.Hash)/2) + 4 }

// recordLen is the length of the whole record of d.
func recordLen(d digest.Digest) int64 { return recordHeaderLen(d) + d.Size }

// putHeader writes the header of the record of blob d with data into hdr,
// which is recordHeaderLen(d) bytes long.
func putHeader(hdr []byte, d digest.Digest, data []byte) {
	encodeHeader(hdr, d, uint32(len(data)), crc32.Checksum(data, castagnoli))
}

// encodeHeader writes a record header for d with the given data size and
// data CRC; parseHeader reads it back.
func encodeHeader(hdr []byte, d digest.Digest, size, dataCRC uint32) {
	hl := len(d.Hash) / 2
	copy(hdr, recMagic)
	hdr[4], hdr[5], hdr[6], hdr[7] = byte(d.Function), byte(hl), 0, 0
	binary.LittleEndian.PutUint32(hdr[8:], size)
	binary.LittleEndian.PutUint32(hdr[12:], dataCRC)
	hex.Decode(hdr[recFixedHdr:recFixedHdr+hl], []byte(d.Hash)) // d.Hash is valid lowercase hex
	binary.LittleEndian.PutUint32(hdr[recFixedHdr+hl:], crc32.Checksum(hdr[:recFixedHdr+hl], castagnoli))
}

// frameHeader checks a record header at the start of b, without decoding
// the digest: it returns the header length and blob size, or ok false if
// b does not start with a well-formed header (or is too short for one).
func frameHeader(b []byte) (hdrLen int, size int64, ok bool) {
	if len(b) < recFixedHdr || string(b[:4]) != recMagic || b[6] != 0 || b[7] != 0 {
		return 0, 0, false
	}
	fn := digest.Function(b[4])
	hl := int(b[5])
	if !digest.IsSupported(fn) || digest.HexLen(fn) != 2*hl || len(b) < recFixedHdr+hl+4 {
		return 0, 0, false
	}
	hdrLen = recFixedHdr + hl + 4
	if binary.LittleEndian.Uint32(b[hdrLen-4:]) != crc32.Checksum(b[:hdrLen-4], castagnoli) {
		return 0, 0, false
	}
	size = int64(binary.LittleEndian.Uint32(b[8:]))
	if size == 0 || size > smallBlob {
		return 0, 0, false
	}
	return hdrLen, size, true
}

// parseHeader decodes and checks a record header at the start of b. It
// returns the digest and data CRC, and the header length, or ok false if
// b does not start with a well-formed header (or is too short for one).
func parseHeader(b []byte) (d digest.Digest, crc uint32, hdrLen int, ok bool) {
	hdrLen, size, ok := frameHeader(b)
	if !ok {
		return d, 0, 0, false
	}
	hl := hdrLen - recFixedHdr - 4
	d, err := digest.Parse(digest.Function(b[4]), hex.EncodeToString(b[recFixedHdr:recFixedHdr+hl]), size)
	if err != nil {
		return d, 0, 0, false
	}
	return d, binary.LittleEndian.Uint32(b[12:]), hdrLen, true
}

// packFormat frames segment records for internal/recordlog.
type packFormat struct{}

func (packFormat) MaxHeader() int { return recFixedHdr + maxHashBytes + 4 }

func (packFormat) Frame(hdr []byte) (int64, bool) {
	hdrLen, size, ok := frameHeader(hdr)
	return int64(hdrLen) + size, ok
}

// Verify checks the data CRC; Frame checked the header's.
func (packFormat) Verify(rec []byte) bool {
	hdrLen := recFixedHdr + int(rec[5]) + 4
	return crc32.Checksum(rec[hdrLen:], castagnoli) == binary.LittleEndian.Uint32(rec[12:])
}

// checkRecord reports whether rec is an intact record of d. It allocates
// nothing (BatchReadBlobs checks a record per blob): the header's hash is
// compared with d's in hex on the stack.
func checkRecord(rec []byte, d digest.Digest) bool {
	hdrLen, size, ok := frameHeader(rec)
	if !ok || digest.Function(rec[4]) != d.Function || size != d.Size || int64(len(rec)) != int64(hdrLen)+d.Size {
		return false
	}
	var hx [2 * maxHashBytes]byte
	n := hex.Encode(hx[:], rec[recFixedHdr:hdrLen-4])
	return string(hx[:n]) == d.Hash && crc32.Checksum(rec[hdrLen:], castagnoli) == binary.LittleEndian.Uint32(rec[12:])
}

// packedRecord is a record found by the start-up scan.
type packedRecord struct {
	d   digest.Digest
	seg *segment
	off int64
}

// segmentMTime is the modification time of a segment, used to place its
// blobs in the LRU order rebuilt at start.
func segmentMTime(g *segment) time.Time {
	if info, err := g.log.Stat(); err == nil {
		return info.ModTime()
	}
	return time.Time{}
}

// writePacked appends the verified blob d to the current segment and
// indexes it. rec holds room for the record header, then the data.
func (s *Disk) writePacked(d digest.Digest, rec []byte) error {
	if d.IsEmpty() || !s.claim(d) {
		return nil
	}
	hdrLen := recordHeaderLen(d)
	putHeader(rec[:hdrLen], d, rec[hdrLen:])
	// The segment can be evicted between the append and the indexing
	// (only when the store is tiny for its load); then append again.
	for attempt := 0; attempt < 10; attempt++ {
		g, off, err := s.packs.append(rec)
		if err == nil && s.fsync {
			err = g.log.Sync(off + int64(len(rec)))
		}
		if err != nil {
			if g != nil {
				g.unref()
			}
			s.release(d, nil)
			return fmt.Errorf("writing blob %s: %w", d, err)
		}
		ok := s.releasePacked(d, g, off)
		g.unref()
		if ok {
			return nil
		}
	}
	s.release(d, nil)
	return fmt.Errorf("writing blob %s: its segment was evicted while it was written; the store's bound is too small for its load", d)
}

// releasePacked ends a claim on d by indexing it at (g, off), unless g was
// evicted meanwhile: then it reports false and d stays claimed.
func (s *Disk) releasePacked(d digest.Digest, g *segment, off int64) bool {
	s.mu.Lock()
	if g.dead {
		s.mu.Unlock()
		return false
	}
	ev := s.releaseLocked(d, newEntry(d, g, off))
	s.mu.Unlock()
	s.remove(ev)
	return true
}

// readPacked reads the record of d (e) at (g, off), on which the caller holds
// a reference that readPacked drops, and returns d's data from offset on.
// A damaged record drops e from the index and gives ErrNotFound.
func (s *Disk) readPacked(d digest.Digest, e *entry, g *segment, off int64, offset int64) (io.ReadCloser, error) {
	rec := make([]byte, recordLen(d))
	_, err := g.log.ReadAt(rec, off)
	g.unref()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading blob %s: %w", d, err)
	}
	if err != nil || !checkRecord(rec, d) {
		s.dropDamaged(e, g)
		return nil, ErrNotFound
	}
	data := rec[recordHeaderLen(d):]
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	return &bytesReadCloser{data: data[offset:]}, nil
}

// bytesReadCloser serves a packed blob read into memory.
type bytesReadCloser struct{ data []byte }

func (r *bytesReadCloser) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func (r *bytesReadCloser) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(r.data)
	r.data = r.data[n:]
	return int64(n), err
}

func (r *bytesReadCloser) Close() error { r.data = nil; return nil }

// dropDamaged removes e from the index if it is still the entry of its
// digest at segment g: its record failed its checks.
func (s *Disk) dropDamaged(e *entry, g *segment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idx.holds(e) && e.seg == g {
		s.idx.remove(e)
	}
}
