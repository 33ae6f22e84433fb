package frontend

import (
	"fmt"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The responses to FindMissingBlobs, BatchUpdateBlobs and BatchReadBlobs
// hold thousands of small messages; proto.Marshal walks them through
// reflection tables twice (size, then bytes). The codec writes the same
// bytes with one writer driven by a short description of each message
// (msgDesc): its fields in number order, each a tag and a pair of
// functions that measure and write it, built once, at init, from the
// generated getters (digestField, statusField, ...). The descriptions use
// only the generated types' public API: a getter of the wrong type does
// not compile, and unknown fields are found through ProtoReflect.
// Encoding another message is one more description.
//
// The writer takes only the messages the handlers build: no unknown
// fields in the described messages, no nil entries in repeated fields.
// For anything else it reports false and the standard codec does it.

// field is one field of a message of type T.
type field[T any] struct {
	num protowire.Number
	// size is the encoded length of the field in m (tag included); false
	// if the writer does not take it. It records the length of each
	// submessage in w, for write.
	size func(w *msgWriter, m *T) (int, bool)
	// write appends the field in m, which size has measured; false if a
	// status cannot be marshalled.
	write func(w *msgWriter, b []byte, m *T) ([]byte, bool)
}

// msgDesc describes the fields of one generated message type.
type msgDesc[T any] struct {
	plain  func(m *T) bool // m has no unknown fields
	fields []field[T]
}

// message is the pointer type of a generated message T.
type message[T any] interface {
	*T
	proto.Message
}

// describe is the description of message type T with fields. It panics
// unless the field numbers rise and stay below 16 (one-byte tags): a
// mistake in a description, found by any test.
func describe[T any, P message[T]](fields ...field[T]) *msgDesc[T] {
	for i, f := range fields {
		if f.num < 1 || f.num >= 16 || (i > 0 && f.num <= fields[i-1].num) {
			var m T
			panic(fmt.Sprintf("frontend: %s field %d: field numbers must rise and stay below 16",
				P(&m).ProtoReflect().Descriptor().FullName(), f.num))
		}
	}
	return &msgDesc[T]{
		plain:  func(m *T) bool { return len(P(m).ProtoReflect().GetUnknown()) == 0 },
		fields: fields,
	}
}

// tag is the one-byte tag of field num of wire type t (describe checks
// num).
func tag(num protowire.Number, t protowire.Type) byte { return byte(protowire.EncodeTag(num, t)) }

// enumField is an enum field num (a varint, sign-extended; absent when 0).
func enumField[T any, E ~int32](num protowire.Number, get func(*T) E) field[T] {
	t := tag(num, protowire.VarintType)
	return field[T]{
		num: num,
		size: func(_ *msgWriter, m *T) (int, bool) {
			if v := get(m); v != 0 {
				return 1 + protowire.SizeVarint(uint64(v)), true
			}
			return 0, true
		},
		write: func(_ *msgWriter, b []byte, m *T) ([]byte, bool) {
			if v := get(m); v != 0 {
				b = append(b, t)
				b = protowire.AppendVarint(b, uint64(v))
			}
			return b, true
		},
	}
}

// bytesField is a bytes field num (absent when empty).
func bytesField[T any](num protowire.Number, get func(*T) []byte) field[T] {
	t := tag(num, protowire.BytesType)
	return field[T]{
		num: num,
		size: func(_ *msgWriter, m *T) (int, bool) {
			if k := len(get(m)); k > 0 {
				return 1 + protowire.SizeBytes(k), true
			}
			return 0, true
		},
		write: func(_ *msgWriter, b []byte, m *T) ([]byte, bool) {
			if v := get(m); len(v) > 0 {
				b = append(b, t)
				b = protowire.AppendBytes(b, v)
			}
			return b, true
		},
	}
}

// digestField is a Digest field num (absent when nil).
func digestField[T any](num protowire.Number, get func(*T) *repb.Digest) field[T] {
	t := tag(num, protowire.BytesType)
	return field[T]{
		num: num,
		size: func(_ *msgWriter, m *T) (int, bool) {
			d := get(m)
			if d == nil {
				return 0, true
			}
			if !plainDigest(d) {
				return 0, false
			}
			return 1 + protowire.SizeBytes(digestLen(d)), true
		},
		write: func(_ *msgWriter, b []byte, m *T) ([]byte, bool) {
			if d := get(m); d != nil {
				b = appendDigestField(b, t, d)
			}
			return b, true
		},
	}
}

// digestsField is a repeated Digest field num (no entry nil).
func digestsField[T any](num protowire.Number, get func(*T) []*repb.Digest) field[T] {
	t := tag(num, protowire.BytesType)
	return field[T]{
		num: num,
		size: func(_ *msgWriter, m *T) (int, bool) {
			n := 0
			for _, d := range get(m) {
				if d == nil || !plainDigest(d) {
					return 0, false
				}
				n += 1 + protowire.SizeBytes(digestLen(d))
			}
			return n, true
		},
		write: func(_ *msgWriter, b []byte, m *T) ([]byte, bool) {
			for _, d := range get(m) {
				b = appendDigestField(b, t, d)
			}
			return b, true
		},
	}
}

// statusField is a google.rpc.Status field num (absent when nil), written
// by proto unless it is a plain OK status.
func statusField[T any](num protowire.Number, get func(*T) *rpcstatus.Status) field[T] {
	t := tag(num, protowire.BytesType)
	return field[T]{
		num: num,
		size: func(w *msgWriter, m *T) (int, bool) {
			st := get(m)
			if st == nil {
				return 0, true
			}
			k := statusLen(st)
			w.sizes = append(w.sizes, k)
			return 1 + protowire.SizeBytes(k), true
		},
		write: func(w *msgWriter, b []byte, m *T) ([]byte, bool) {
			st := get(m)
			if st == nil {
				return b, true
			}
			k := w.sizes[w.next]
			w.next++
			b = append(b, t)
			b = protowire.AppendVarint(b, uint64(k))
			if k == 0 {
				return b, true
			}
			b, err := (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, st)
			return b, err == nil
		},
	}
}

// repeatedField is a repeated message field num of messages described by
// sub (no entry nil).
func repeatedField[T, E any](num protowire.Number, get func(*T) []*E, sub *msgDesc[E]) field[T] {
	t := tag(num, protowire.BytesType)
	return field[T]{
		num: num,
		size: func(w *msgWriter, m *T) (int, bool) {
			n := 0
			for _, e := range get(m) {
				if e == nil {
					return 0, false
				}
				i := len(w.sizes)
				w.sizes = append(w.sizes, 0)
				k, ok := sub.size(w, e)
				if !ok {
					return 0, false
				}
				w.sizes[i] = k
				n += 1 + protowire.SizeBytes(k)
			}
			return n, true
		},
		write: func(w *msgWriter, b []byte, m *T) ([]byte, bool) {
			for _, e := range get(m) {
				k := w.sizes[w.next]
				w.next++
				b = append(b, t)
				b = protowire.AppendVarint(b, uint64(k))
				var ok bool
				if b, ok = sub.write(w, b, e); !ok {
					return b, false
				}
			}
			return b, true
		},
	}
}

// The messages the codec encodes itself.
var (
	findMissingResponseDesc = describe(
		digestsField(2, (*repb.FindMissingBlobsResponse).GetMissingBlobDigests))
	batchUpdateResponseDesc = describe(
		repeatedField(1, (*repb.BatchUpdateBlobsResponse).GetResponses, describe(
			digestField(1, (*repb.BatchUpdateBlobsResponse_Response).GetDigest),
			statusField(2, (*repb.BatchUpdateBlobsResponse_Response).GetStatus))))
	batchReadResponseDesc = describe(
		repeatedField(1, (*repb.BatchReadBlobsResponse).GetResponses, describe(
			digestField(1, (*repb.BatchReadBlobsResponse_Response).GetDigest),
			bytesField(2, (*repb.BatchReadBlobsResponse_Response).GetData),
			statusField(3, (*repb.BatchReadBlobsResponse_Response).GetStatus),
			enumField(4, (*repb.BatchReadBlobsResponse_Response).GetCompressor))))
)

// encodeResponse writes v as proto.Marshal would if it is a response the
// codec encodes itself and the writer takes it.
func encodeResponse(v any) (mem.BufferSlice, bool) {
	switch m := v.(type) {
	case *repb.FindMissingBlobsResponse:
		return encodeMessage(findMissingResponseDesc, m)
	case *repb.BatchUpdateBlobsResponse:
		return encodeMessage(batchUpdateResponseDesc, m)
	case *repb.BatchReadBlobsResponse:
		return encodeMessage(batchReadResponseDesc, m)
	}
	return nil, false
}

// encodeMessage writes m, described by d, as proto.Marshal would, into
// one buffer (pooled if large); false if the writer does not take it (see
// above).
func encodeMessage[T any](d *msgDesc[T], m *T) (mem.BufferSlice, bool) {
	w := msgWriters.Get().(*msgWriter)
	defer w.release()
	n, ok := d.size(w, m)
	if !ok {
		return nil, false
	}
	b, ok := d.write(w, encodedBuffer(n), m)
	if !ok {
		return nil, false
	}
	return wrapEncoded(b), true
}

// msgWriter is the state of one encoding, in two passes: size measures
// every submessage once, in the order write then meets them, and keeps
// their lengths for write, which so never measures a message again.
type msgWriter struct {
	sizes []int // of the submessages, in order
	next  int   // index in sizes of the next submessage to write
}

var msgWriters = sync.Pool{New: func() any { return new(msgWriter) }}

// release empties w and returns it to msgWriters (dropping a record of
// unusual size rather than keeping it in the pool).
func (w *msgWriter) release() {
	if cap(w.sizes) > 1<<20 {
		return
	}
	w.sizes, w.next = w.sizes[:0], 0
	msgWriters.Put(w)
}

// size is the encoded length of m; false if it has unknown fields or nil
// entries, or holds a message that does.
func (d *msgDesc[T]) size(w *msgWriter, m *T) (int, bool) {
	if !d.plain(m) {
		return 0, false
	}
	n := 0
	for i := range d.fields {
		k, ok := d.fields[i].size(w, m)
		if !ok {
			return 0, false
		}
		n += k
	}
	return n, true
}

// write appends m, which size has measured; false if a status cannot be
// marshalled.
func (d *msgDesc[T]) write(w *msgWriter, b []byte, m *T) ([]byte, bool) {
	for i := range d.fields {
		var ok bool
		if b, ok = d.fields[i].write(w, b, m); !ok {
			return b, false
		}
	}
	return b, true
}

// digestLen is the encoded length of a Digest without unknown fields
// (plainDigest).
func digestLen(d *repb.Digest) int {
	n := 0
	if len(d.Hash) > 0 {
		n += 1 + protowire.SizeBytes(len(d.Hash))
	}
	if d.SizeBytes != 0 {
		n += 1 + protowire.SizeVarint(uint64(d.SizeBytes))
	}
	return n
}

// appendDigestField appends d, a plain Digest, as a field under tag:
// hash (1), size_bytes (2).
func appendDigestField(b []byte, tag byte, d *repb.Digest) []byte {
	n := 0 // digestLen(d), inline: a call per digest costs 3% of a FindMissingBlobs response
	if len(d.Hash) > 0 {
		n += 1 + protowire.SizeBytes(len(d.Hash))
	}
	if d.SizeBytes != 0 {
		n += 1 + protowire.SizeVarint(uint64(d.SizeBytes))
	}
	b = append(b, tag)
	b = protowire.AppendVarint(b, uint64(n))
	if len(d.Hash) > 0 {
		b = append(b, tagBytes1)
		b = protowire.AppendString(b, d.Hash)
	}
	if d.SizeBytes != 0 {
		b = append(b, tagVarint2)
		b = protowire.AppendVarint(b, uint64(d.SizeBytes))
	}
	return b
}

// plainDigest reports whether d has no unknown fields: digestLen and
// appendDigestField encode it.
func plainDigest(d *repb.Digest) bool {
	return len(d.ProtoReflect().GetUnknown()) == 0
}

// okStatus reports whether st is a plain OK status: it encodes to nothing.
func okStatus(st *rpcstatus.Status) bool {
	return st.Code == 0 && st.Message == "" && len(st.Details) == 0 && len(st.ProtoReflect().GetUnknown()) == 0
}

// statusLen is the encoded length of st.
func statusLen(st *rpcstatus.Status) int {
	if okStatus(st) {
		return 0
	}
	return proto.Size(st)
}

// encodedBuffer returns an empty buffer with room for n bytes and wraps
// the filled result for gRPC, pooled if it is large.
func encodedBuffer(n int) []byte {
	if n < minPooled {
		return make([]byte, 0, n)
	}
	return getData(n)[:0]
}

func wrapEncoded(b []byte) mem.BufferSlice {
	if cap(b) < minPooled {
		return mem.BufferSlice{mem.SliceBuffer(b)}
	}
	return mem.BufferSlice{mem.NewBuffer(&b, chunkPool{})}
}
