package blobstore

import "io"

// memChunkSize is the size of the pieces a Memory blob is held in. A blob
// is never one large slice: its writer takes each piece once, as the bytes
// arrive (the digest gives the size, so nothing is ever grown and copied),
// and no piece is larger than this, so a big blob costs neither a large
// contiguous span nor a copy, its memory is what it holds, not a doubling
// buffer's slack, and an evicted blob's pieces fit any later upload.
const memChunkSize = 1 << 20

// memChunks is a blob's bytes: every piece memChunkSize long but the last.
type memChunks [][]byte

func (c memChunks) size() int64 {
	if len(c) == 0 {
		return 0
	}
	return int64(len(c)-1)*memChunkSize + int64(len(c[len(c)-1]))
}

// spareChunks are full-size chunks nobody reads any more, kept for the
// next uploads to fill (see Memory). A reused chunk needs neither the
// zeroing of a new allocation nor, on a guest that hands free memory back
// to its host, the slow faulting in of fresh pages.
type spareChunks struct{ free [][]byte }

func (s *spareChunks) put(c []byte) { s.free = append(s.free, c[:0]) }

// get returns a spare chunk, empty, or nil if there is none.
func (s *spareChunks) get() []byte {
	if len(s.free) == 0 {
		return nil
	}
	c := s.free[len(s.free)-1]
	s.free[len(s.free)-1] = nil
	s.free = s.free[:len(s.free)-1]
	return c
}

func (s *spareChunks) bytes() int64 { return int64(len(s.free)) * memChunkSize }

// memReader streams a blob's chunks without copying them into one. While
// it is open the chunks stay the blob's, even if the blob is evicted.
type memReader struct {
	m      *Memory
	ent    *memEntry // nil once closed
	chunks memChunks
	i, off int // the next byte is chunks[i][off]
}

func (r *memReader) next() []byte {
	for r.i < len(r.chunks) && r.off == len(r.chunks[r.i]) {
		r.i, r.off = r.i+1, 0
	}
	if r.i == len(r.chunks) {
		return nil
	}
	return r.chunks[r.i][r.off:]
}

func (r *memReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := r.next()
		if c == nil {
			break
		}
		k := copy(p[n:], c)
		n += k
		r.off += k
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo hands w the chunks themselves, which w must not keep or change
// (the io.Writer contract).
func (r *memReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for c := r.next(); c != nil; c = r.next() {
		n, err := w.Write(c)
		total += int64(n)
		r.off += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Close implements io.Closer. The chunks may be another blob's after it,
// so the reader forgets them.
func (r *memReader) Close() error {
	if r.ent != nil {
		r.m.closeReader(r.ent)
		r.ent, r.chunks, r.i = nil, nil, 0
	}
	return nil
}

// memWriter holds a blob's bytes its caller verifies (v only counts them).
type memWriter struct {
	m        *Memory
	v        verifier
	reserved int64     // bytes reserved in m for this upload
	full     int64     // bytes of the full-size chunks it took from m
	chunks   memChunks // the last one may have room left
	done     bool      // committed or closed
}

func (w *memWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriterDone
	}
	// The count refuses bytes beyond the digest's size, so the chunks
	// taken below never add up to more than the blob.
	if err := w.v.count(p); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		last := len(w.chunks) - 1
		if last < 0 || len(w.chunks[last]) == cap(w.chunks[last]) {
			held := int64(len(w.chunks)) * memChunkSize
			n := min(memChunkSize, w.v.want.Size-held)
			if n == memChunkSize {
				w.full += n
			}
			w.chunks = append(w.chunks, w.m.chunk(n))
			last++
		}
		c := w.chunks[last]
		k := copy(c[len(c):cap(c)], p)
		w.chunks[last], p = c[:len(c)+k], p[k:]
	}
	return n, nil
}

func (w *memWriter) Written() int64 { return w.v.n }

func (w *memWriter) CommitVerified(p Proof) error {
	if w.done {
		return errWriterDone
	}
	if err := p.Vouches(w.v.want, w.v.n); err != nil {
		return err
	}
	w.m.insert(w.v.want, w.chunks, w.reserved, w.full)
	w.chunks, w.done = nil, true
	return nil
}

func (w *memWriter) Close() error {
	if !w.done {
		w.m.abandon(w.chunks, w.reserved, w.full)
		w.chunks, w.done = nil, true
	}
	return nil
}
