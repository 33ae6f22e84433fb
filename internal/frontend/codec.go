package frontend

import (
	"math/bits"
	"sync"
	"unicode/utf8"
	"unsafe"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// codec is gRPC's proto codec with shortcuts for the messages that carry
// the storage traffic. Everything else goes to the standard codec, and
// every shortcut gives the same result as it would.
//
// Sending: a ByteStream ReadResponse is sent as a few header bytes
// followed by its data, rather than copied whole into a new buffer. Reads
// move megabytes per message, and the copy (with the allocation and
// zeroing of a fresh buffer above gRPC's pooling sizes) was a large share
// of their cost. The bytes on the wire are the same as proto.Marshal's.
// The Read handler never changes a ReadResponse's data after sending it,
// which is what makes handing gRPC the slice itself safe. A pooledChunk
// (see bytestream.go) is sent the same way, its buffer going back to its
// pool once gRPC has written it. The responses to FindMissingBlobs,
// BatchUpdateBlobs and BatchReadBlobs are written by one table-driven
// writer (encode.go); FuzzEncoders checks it against proto.Marshal.
//
// Receiving: WriteRequest, BatchUpdateBlobsRequest and
// FindMissingBlobsRequest, the messages a server receives in bulk, are
// decoded straight from gRPC's receive buffers (a large message arrives in
// many 16 KiB buffers). The standard codec first joins them into one
// buffer and proto.Unmarshal then copies the bytes fields out of it again;
// here WriteRequest data is not copied at all (it stays in the receive
// buffers, see writeMsg), batch data is copied once, and the many Digest
// messages of a request (BatchReadBlobsRequest's too) share a few
// allocations. The decoders take only the well-formed messages that use
// the known fields once each (what every client sends); anything else
// (unknown fields, repeated singular fields, invalid UTF-8, truncation)
// goes to proto.Unmarshal, so the result, and the error for malformed
// input, is exactly proto's. FuzzDecoders checks that.
//
// It is a server's codec only (ServerCodec): the clients in this process
// (the benchmarks' stand-in for Bazel, the worker) encode and decode as
// plain gRPC does.
type codec struct{ std encoding.CodecV2 }

// readResponseData is the field number of ReadResponse.data.
const readResponseData = 10

// Codec is the codec of every gRPC server that serves the storage
// services (Register): the handlers send messages only it can encode. It
// is transparent to every other message and service.
func Codec() encoding.CodecV2 { return codec{std: encoding.GetCodecV2("proto")} }

// ServerCodec is the server option that installs Codec.
func ServerCodec() grpc.ServerOption { return grpc.ForceServerCodecV2(Codec()) }

func (codec) Name() string { return "proto" }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *pooledChunk:
		return mem.BufferSlice{mem.SliceBuffer(dataHeader(len(m.data))), mem.NewBuffer(m.buf, chunkPool{})}, nil
	case *bspb.ReadResponse:
		if len(m.Data) > 0 && len(m.ProtoReflect().GetUnknown()) == 0 {
			return mem.BufferSlice{mem.SliceBuffer(dataHeader(len(m.Data))), mem.SliceBuffer(m.Data)}, nil
		}
	default:
		if bs, ok := encodeResponse(v); ok {
			return bs, nil
		}
	}
	return c.std.Marshal(v)
}

// dataHeader is the tag and length of a ReadResponse.data field of n bytes.
func dataHeader(n int) []byte {
	hdr := make([]byte, 0, 1+protowire.SizeVarint(uint64(n)))
	hdr = protowire.AppendTag(hdr, readResponseData, protowire.BytesType)
	return protowire.AppendVarint(hdr, uint64(n))
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	ok := false
	switch m := v.(type) {
	case *writeMsg:
		return c.unmarshalWriteMsg(data, m)
	case *repb.FindMissingBlobsRequest:
		ok = decodeFindMissing(data, m)
	case *repb.BatchUpdateBlobsRequest:
		ok = decodeBatchUpdate(data, m)
	case *repb.BatchReadBlobsRequest:
		ok = decodeBatchRead(data, m)
	}
	if ok {
		return nil
	}
	// proto.Unmarshal resets the message first: nothing of a partial
	// decode survives.
	return c.std.Unmarshal(data, v)
}

// Wire tags (field number << 3 | wire type) of the fields decoded here.
const (
	tagBytes1  = 1<<3 | 2
	tagBytes2  = 2<<3 | 2
	tagVarint2 = 2<<3 | 0
	tagVarint3 = 3<<3 | 0
	tagBytes3  = 3<<3 | 2
	tagVarint4 = 4<<3 | 0
	tagVarint5 = 5<<3 | 0
	tagBytes10 = 10<<3 | 2
)

// wire reads protobuf wire format from a list of buffers without joining
// them. Every method reports false on anything it does not accept; the
// caller then leaves the message to proto.Unmarshal.
type wire struct {
	bufs mem.BufferSlice
	next int    // index of the next buffer
	cur  []byte // unread part of the current buffer
	left int    // unread bytes in all
}

func newWire(bufs mem.BufferSlice) wire { return wire{bufs: bufs, left: bufs.Len()} }

// fill makes cur non-empty, if any bytes are left.
func (w *wire) fill() bool {
	for len(w.cur) == 0 {
		if w.next >= len(w.bufs) {
			return false
		}
		w.cur = w.bufs[w.next].ReadOnlyData()
		w.next++
	}
	return true
}

// varint reads a varint as protowire.ConsumeVarint does: at most ten
// bytes, the tenth at most 1. One-byte varints (tags, short lengths) are
// read inline.
func (w *wire) varint() (uint64, bool) {
	if len(w.cur) > 0 && w.cur[0] < 0x80 {
		v := uint64(w.cur[0])
		w.cur = w.cur[1:]
		w.left--
		return v, true
	}
	return w.varintSlow()
}

func (w *wire) varintSlow() (uint64, bool) {
	if len(w.cur) >= binaryMaxVarintLen {
		v, n := protowire.ConsumeVarint(w.cur)
		if n < 0 {
			return 0, false
		}
		w.cur = w.cur[n:]
		w.left -= n
		return v, true
	}
	var v uint64
	for i := 0; i < binaryMaxVarintLen; i++ {
		if !w.fill() {
			return 0, false
		}
		b := w.cur[0]
		w.cur = w.cur[1:]
		w.left--
		if i == binaryMaxVarintLen-1 && b > 1 {
			return 0, false
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, true
		}
	}
	return 0, false
}

const binaryMaxVarintLen = 10

// length reads the length of a length-delimited field, which must fit in
// limit, the bytes left in the enclosing message.
func (w *wire) length(limit int) (int, bool) {
	n, ok := w.varint()
	if !ok || limit < 0 || n > uint64(limit) || n > uint64(w.left) {
		return 0, false
	}
	return int(n), true
}

// copyTo fills dst from the next len(dst) bytes.
func (w *wire) copyTo(dst []byte) {
	for len(dst) > 0 {
		w.fill()
		k := copy(dst, w.cur)
		dst = dst[k:]
		w.cur = w.cur[k:]
		w.left -= k
	}
}

// view returns the next n bytes, in place if they lie in one buffer,
// else copied. The result is valid only while the buffers are.
func (w *wire) view(n int) []byte {
	if n == 0 {
		return nil
	}
	w.fill()
	if n <= len(w.cur) {
		b := w.cur[:n:n]
		w.cur = w.cur[n:]
		w.left -= n
		return b
	}
	b := make([]byte, n)
	w.copyTo(b)
	return b
}

// str reads a string field's value, which must be valid UTF-8 (proto3).
func (w *wire) str(limit int) (string, bool) {
	n, ok := w.length(limit)
	if !ok {
		return "", false
	}
	b := w.view(n)
	if !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

// writeMsg is a ByteStream WriteRequest as the Write handler receives it.
// Its data stays where gRPC received it: the codec takes a reference to
// each receive buffer the data lies in and keeps views into them, instead
// of copying the data out (a large upload's bytes are then copied once in
// the server, into the blob's file buffers). The handler releases the
// buffers with free once the data is written.
//
// It is not a proto.Message: only this codec decodes it, and the
// interceptors see it through GetResourceName and DataLen.
type writeMsg struct {
	resourceName string
	writeOffset  int64
	finishWrite  bool
	data         [][]byte        // the data, in order: views into held, or one copied slice
	held         mem.BufferSlice // buffers referenced for data; free releases them
	n            int             // total length of data
}

// GetResourceName is the request's resource_name (empty after the first
// request of a stream, as clients may send it).
func (m *writeMsg) GetResourceName() string { return m.resourceName }

// DataLen is the length of the request's data.
func (m *writeMsg) DataLen() int { return m.n }

// free releases the buffers the data lies in and empties m; the data
// must not be used afterwards. It may be called more than once.
func (m *writeMsg) free() {
	if m == nil {
		return
	}
	m.held.Free()
	clear(m.held)
	clear(m.data)
	*m = writeMsg{held: m.held[:0], data: m.data[:0]}
}

// skip drops the first k bytes of the data (all of it if k is larger).
func (m *writeMsg) skip(k int64) {
	for k > 0 && len(m.data) > 0 {
		if int64(len(m.data[0])) > k {
			m.data[0] = m.data[0][k:]
			m.n -= int(k)
			return
		}
		k -= int64(len(m.data[0]))
		m.n -= len(m.data[0])
		m.data[0] = nil
		m.data = m.data[1:]
	}
}

// decodeWriteMsg decodes a ByteStream WriteRequest: resource_name (1),
// write_offset (2), finish_write (3), data (10), leaving the data in bufs
// (see writeMsg). m must be empty (new or freed).
func decodeWriteMsg(bufs mem.BufferSlice, m *writeMsg) bool {
	w := newWire(bufs)
	var seen uint16
	once := func(field uint) bool {
		if seen&(1<<field) != 0 {
			return false
		}
		seen |= 1 << field
		return true
	}
	for w.left > 0 {
		tag, ok := w.varint()
		if !ok {
			return false
		}
		switch tag {
		case tagBytes1:
			if !once(1) {
				return false
			}
			if m.resourceName, ok = w.str(w.left); !ok {
				return false
			}
		case tagVarint2:
			v, ok := w.varint()
			if !ok || !once(2) {
				return false
			}
			m.writeOffset = int64(v)
		case tagVarint3:
			v, ok := w.varint()
			if !ok || !once(3) {
				return false
			}
			m.finishWrite = v != 0
		case tagBytes10:
			n, ok := w.length(w.left)
			if !ok || !once(10) {
				return false
			}
			w.hold(n, m)
		default:
			return false
		}
	}
	return true
}

// hold appends the next n bytes to m's data as views into the buffers
// they lie in, taking a reference to each of those buffers.
func (w *wire) hold(n int, m *writeMsg) {
	m.n += n
	last := -1 // index in w.bufs of the buffer held last
	for n > 0 {
		w.fill()
		k := min(n, len(w.cur))
		if i := w.next - 1; i != last {
			w.bufs[i].Ref()
			m.held = append(m.held, w.bufs[i])
			last = i
		}
		m.data = append(m.data, w.cur[:k:k])
		w.cur = w.cur[k:]
		w.left -= k
		n -= k
	}
}

// unmarshalWriteMsg decodes a WriteRequest into m, through proto when
// decodeWriteMsg does not take it; the data is then a copy of its own.
func (c codec) unmarshalWriteMsg(data mem.BufferSlice, m *writeMsg) error {
	m.free()
	if decodeWriteMsg(data, m) {
		return nil
	}
	m.free()
	var req bspb.WriteRequest
	if err := c.std.Unmarshal(data, &req); err != nil {
		return err
	}
	*m = writeMsg{resourceName: req.ResourceName, writeOffset: req.WriteOffset, finishWrite: req.FinishWrite, n: len(req.Data)}
	if len(req.Data) > 0 {
		m.data = [][]byte{req.Data}
	}
	return nil
}

// digestSlab hands out Digest messages and their hashes from a few large
// allocations instead of two per digest. Messages and strings never move
// once handed out; a full slab is replaced, not grown.
type digestSlab struct {
	msgs   []repb.Digest
	hashes []byte
	est    int
}

func newDigestSlab(msgBytes int) digestSlab {
	// A SHA-256 entry is about 70 bytes on the wire.
	est := min(msgBytes/64+1, 1<<16)
	return digestSlab{est: est}
}

func (s *digestSlab) digest() *repb.Digest {
	if len(s.msgs) == cap(s.msgs) {
		s.msgs = make([]repb.Digest, 0, s.est)
	}
	s.msgs = s.msgs[:len(s.msgs)+1]
	return &s.msgs[len(s.msgs)-1]
}

// hash returns b as a string in the slab. Strings are never written once
// made: hashes only grows by appending, within its capacity.
func (s *digestSlab) hash(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if cap(s.hashes)-len(s.hashes) < len(b) {
		s.hashes = make([]byte, 0, max(s.est*64, len(b)))
	}
	start := len(s.hashes)
	s.hashes = append(s.hashes, b...)
	return unsafe.String(&s.hashes[start], len(b))
}

// decodeDigest decodes a Digest message of n bytes: hash (1), size_bytes
// (2).
func decodeDigest(w *wire, n int, slab *digestSlab) (*repb.Digest, bool) {
	d := slab.digest()
	end := w.left - n
	var seenHash, seenSize bool
	for w.left > end {
		tag, ok := w.varint()
		if !ok {
			return nil, false
		}
		switch tag {
		case tagBytes1:
			k, ok := w.length(w.left - end)
			if !ok || seenHash {
				return nil, false
			}
			seenHash = true
			b := w.view(k)
			if !utf8.Valid(b) {
				return nil, false
			}
			d.Hash = slab.hash(b)
		case tagVarint2:
			v, ok := w.varint()
			if !ok || seenSize {
				return nil, false
			}
			seenSize = true
			d.SizeBytes = int64(v)
		default:
			return nil, false
		}
	}
	return d, w.left == end
}

// onceStr reads a string field into dst, refusing a second one (seen
// records the first).
func (w *wire) onceStr(seen *bool, dst *string) bool {
	if *seen {
		return false
	}
	*seen = true
	var ok bool
	*dst, ok = w.str(w.left)
	return ok
}

// onceDigestFunction reads a digest_function field into dst, refusing a
// second one.
func (w *wire) onceDigestFunction(seen *bool, dst *repb.DigestFunction_Value) bool {
	v, ok := w.varint()
	if !ok || *seen {
		return false
	}
	*seen = true
	*dst = repb.DigestFunction_Value(int32(v))
	return true
}

// appendDigest reads a length-delimited Digest from the slab onto ds,
// which it sizes by the slab's estimate on the first.
func (w *wire) appendDigest(ds *[]*repb.Digest, slab *digestSlab) bool {
	n, ok := w.length(w.left)
	if !ok {
		return false
	}
	d, ok := decodeDigest(w, n, slab)
	if !ok {
		return false
	}
	if *ds == nil {
		*ds = make([]*repb.Digest, 0, slab.est)
	}
	*ds = append(*ds, d)
	return true
}

// decodeFindMissing decodes a FindMissingBlobsRequest: instance_name (1),
// blob_digests (2, repeated), digest_function (3).
func decodeFindMissing(bufs mem.BufferSlice, m *repb.FindMissingBlobsRequest) bool {
	m.Reset()
	w := newWire(bufs)
	slab := newDigestSlab(w.left)
	var seenName, seenFn bool
	for w.left > 0 {
		tag, ok := w.varint()
		if !ok {
			return false
		}
		switch tag {
		case tagBytes1:
			if !w.onceStr(&seenName, &m.InstanceName) {
				return false
			}
		case tagBytes2:
			if !w.appendDigest(&m.BlobDigests, &slab) {
				return false
			}
		case tagVarint3:
			if !w.onceDigestFunction(&seenFn, &m.DigestFunction) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// decodeBatchRead decodes a BatchReadBlobsRequest: instance_name (1),
// digests (2, repeated), acceptable_compressors (3, repeated, packed or
// not) and digest_function (4). The Digest messages share a few
// allocations, as FindMissingBlobsRequest's do.
func decodeBatchRead(bufs mem.BufferSlice, m *repb.BatchReadBlobsRequest) bool {
	m.Reset()
	w := newWire(bufs)
	slab := newDigestSlab(w.left)
	var seenName, seenFn bool
	for w.left > 0 {
		tag, ok := w.varint()
		if !ok {
			return false
		}
		switch tag {
		case tagBytes1:
			if !w.onceStr(&seenName, &m.InstanceName) {
				return false
			}
		case tagBytes2:
			if !w.appendDigest(&m.Digests, &slab) {
				return false
			}
		case tagVarint3:
			v, ok := w.varint()
			if !ok {
				return false
			}
			m.AcceptableCompressors = append(m.AcceptableCompressors, repb.Compressor_Value(int32(v)))
		case tagBytes3:
			n, ok := w.length(w.left)
			if !ok {
				return false
			}
			for end := w.left - n; w.left > end; {
				v, ok := w.varint()
				if !ok || w.left < end {
					return false
				}
				m.AcceptableCompressors = append(m.AcceptableCompressors, repb.Compressor_Value(int32(v)))
			}
		case tagVarint4:
			if !w.onceDigestFunction(&seenFn, &m.DigestFunction) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// decodeBatchUpdate decodes a BatchUpdateBlobsRequest: instance_name (1),
// requests (2, repeated: digest (1), data (2), compressor (3)) and
// digest_function (5). The blobs' data share one allocation.
func decodeBatchUpdate(bufs mem.BufferSlice, m *repb.BatchUpdateBlobsRequest) bool {
	m.Reset()
	w := newWire(bufs)
	// Digest messages are few per byte here: size the slab by a guess of
	// one blob per KiB.
	slab := newDigestSlab(w.left / 16)
	var arena []byte
	var reqs []repb.BatchUpdateBlobsRequest_Request
	var seenName, seenFn bool
	for w.left > 0 {
		tag, ok := w.varint()
		if !ok {
			return false
		}
		switch tag {
		case tagBytes1:
			if !w.onceStr(&seenName, &m.InstanceName) {
				return false
			}
		case tagBytes2:
			n, ok := w.length(w.left)
			if !ok {
				return false
			}
			if len(reqs) == cap(reqs) {
				reqs = make([]repb.BatchUpdateBlobsRequest_Request, 0, max(16, slab.est))
			}
			reqs = reqs[:len(reqs)+1]
			r := &reqs[len(reqs)-1]
			if !decodeBatchEntry(&w, n, r, &slab, &arena) {
				return false
			}
			m.Requests = append(m.Requests, r)
		case tagVarint5:
			if !w.onceDigestFunction(&seenFn, &m.DigestFunction) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// decodeBatchEntry decodes one BatchUpdateBlobsRequest.Request of n bytes.
// Data is copied into arena, which is allocated on first use with room
// for all that is left of the message.
func decodeBatchEntry(w *wire, n int, r *repb.BatchUpdateBlobsRequest_Request, slab *digestSlab, arena *[]byte) bool {
	end := w.left - n
	var seenData, seenComp bool
	for w.left > end {
		tag, ok := w.varint()
		if !ok {
			return false
		}
		switch tag {
		case tagBytes1:
			k, ok := w.length(w.left - end)
			if !ok || r.Digest != nil {
				return false
			}
			if r.Digest, ok = decodeDigest(w, k, slab); !ok {
				return false
			}
		case tagBytes2:
			k, ok := w.length(w.left - end)
			if !ok || seenData {
				return false
			}
			seenData = true
			if k > 0 {
				if cap(*arena)-len(*arena) < k {
					*arena = make([]byte, 0, max(w.left, k))
				}
				start := len(*arena)
				*arena = (*arena)[:start+k]
				r.Data = (*arena)[start : start+k : start+k]
				w.copyTo(r.Data)
			}
		case tagVarint3:
			v, ok := w.varint()
			if !ok || seenComp {
				return false
			}
			seenComp = true
			r.Compressor = repb.Compressor_Value(int32(v))
		default:
			return false
		}
	}
	return w.left == end
}

// Pooled data buffers: WriteRequest data is decoded into buffers of a
// power-of-two capacity, which the Write handler returns once the data is
// stored (releaseData). Small ones are not worth pooling.
const (
	minPooled = 8 << 10
	maxPooled = 64 << 20
)

var dataPools [bits.UintSize]sync.Pool

// getData returns a buffer of n bytes, pooled if n is large enough.
func getData(n int) []byte {
	if n < minPooled || n > maxPooled {
		return make([]byte, n)
	}
	class := bits.Len(uint(n - 1))
	if p, _ := dataPools[class].Get().(*[]byte); p != nil {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<class)
}

// releaseData returns a buffer from getData to its pool. The caller must
// hold the only reference to it: whatever read it has finished.
func releaseData(b []byte) {
	c := cap(b)
	if c < minPooled || c > maxPooled || c&(c-1) != 0 {
		return
	}
	b = b[:c]
	dataPools[bits.Len(uint(c-1))].Put(&b)
}

// BufferPool is the pool gRPC's server should take its buffers from
// (experimental.BufferPool): the buffers that received frames are read
// into and that messages are encoded into. Unlike gRPC's default pool it
// does not zero a buffer before handing it out again, which cost 5-10% of
// the CPU of a large upload; gRPC fills every buffer it takes before
// reading it. It shares its buffers with the decoded WriteRequest data and
// the Read chunks.
func BufferPool() mem.BufferPool { return chunkPool{} }
