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
// (msgDesc): its fields in number order, each a tag, a kind and the
// generated getter of its value, built once, at init (digestField,
// statusField, ...). The writer switches on the kind and calls the getter:
// no reflection and one call per field. The descriptions use only the
// generated types' public API (no unsafe, no private fields): a getter of
// the wrong type for its kind does not compile, and unknown fields are
// found through ProtoReflect.
// Encoding another message is one more description.
//
// The writer takes only the messages the handlers build: no unknown
// fields in the described messages, no nil entries in repeated fields.
// For anything else it reports false and the standard codec does it.

// fieldKind is how a field is encoded.
type fieldKind uint8

const (
	kindEnum     fieldKind = iota // varint (sign-extended), absent when 0
	kindBytes                     // length-delimited, absent when empty
	kindDigest                    // a Digest, absent when nil
	kindDigests                   // repeated Digest, none nil
	kindStatus                    // a google.rpc.Status, absent when nil; through proto unless plain OK
	kindRepeated                  // repeated message described by a msgDesc, none nil
)

// field is one field of a message of type T: its number, tag and kind,
// and the getter of its value (the one of its kind; the others are nil).
// A repeated message field has, instead of a getter, functions that
// measure and write it, which reach the submessages' description.
type field[T any] struct {
	num        protowire.Number
	tag        byte
	kind       fieldKind
	getEnum    func(*T) int32
	getBytes   func(*T) []byte
	getDigest  func(*T) *repb.Digest
	getDigests func(*T) []*repb.Digest
	getStatus  func(*T) *rpcstatus.Status
	// size is the encoded length of the field in m (tags included);
	// false if the writer does not take it. It records the length of
	// each submessage in w, for write.
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

// newField is field num of kind k, of wire type t.
func newField[T any](num protowire.Number, k fieldKind, t protowire.Type) field[T] {
	return field[T]{num: num, tag: byte(protowire.EncodeTag(num, t)), kind: k}
}

// enumField is an enum field num. Its getter returns the value as an
// int32 (a func literal converting the generated getter's result): a
// generic E ~int32 getter would need a wrapper, a second call per field
// that costs 4% of a BatchReadBlobs response.
func enumField[T any](num protowire.Number, get func(*T) int32) field[T] {
	f := newField[T](num, kindEnum, protowire.VarintType)
	f.getEnum = get
	return f
}

// bytesField is a bytes field num.
func bytesField[T any](num protowire.Number, get func(*T) []byte) field[T] {
	f := newField[T](num, kindBytes, protowire.BytesType)
	f.getBytes = get
	return f
}

// digestField is a Digest field num.
func digestField[T any](num protowire.Number, get func(*T) *repb.Digest) field[T] {
	f := newField[T](num, kindDigest, protowire.BytesType)
	f.getDigest = get
	return f
}

// digestsField is a repeated Digest field num.
func digestsField[T any](num protowire.Number, get func(*T) []*repb.Digest) field[T] {
	f := newField[T](num, kindDigests, protowire.BytesType)
	f.getDigests = get
	return f
}

// statusField is a google.rpc.Status field num.
func statusField[T any](num protowire.Number, get func(*T) *rpcstatus.Status) field[T] {
	f := newField[T](num, kindStatus, protowire.BytesType)
	f.getStatus = get
	return f
}

// repeatedField is a repeated message field num of messages described by
// sub.
func repeatedField[T, E any](num protowire.Number, get func(*T) []*E, sub *msgDesc[E]) field[T] {
	f := newField[T](num, kindRepeated, protowire.BytesType)
	f.size = func(w *msgWriter, m *T) (int, bool) {
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
	}
	f.write = func(w *msgWriter, b []byte, m *T) ([]byte, bool) {
		for _, e := range get(m) {
			k := w.sizes[w.next]
			w.next++
			b = append(b, f.tag)
			b = protowire.AppendVarint(b, uint64(k))
			var ok bool
			if b, ok = sub.write(w, b, e); !ok {
				return b, false
			}
		}
		return b, true
	}
	return f
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
			enumField(4, func(r *repb.BatchReadBlobsResponse_Response) int32 { return int32(r.GetCompressor()) }))))
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
		f := &d.fields[i]
		switch f.kind {
		case kindEnum:
			if v := f.getEnum(m); v != 0 {
				n += 1 + protowire.SizeVarint(uint64(v))
			}
		case kindBytes:
			if k := len(f.getBytes(m)); k > 0 {
				n += 1 + protowire.SizeBytes(k)
			}
		case kindDigest:
			if d := f.getDigest(m); d != nil {
				if !plainDigest(d) {
					return 0, false
				}
				n += 1 + protowire.SizeBytes(digestLen(d))
			}
		case kindDigests:
			for _, d := range f.getDigests(m) {
				if d == nil || !plainDigest(d) {
					return 0, false
				}
				n += 1 + protowire.SizeBytes(digestLen(d))
			}
		case kindStatus:
			if st := f.getStatus(m); st != nil {
				k := statusLen(st)
				w.sizes = append(w.sizes, k)
				n += 1 + protowire.SizeBytes(k)
			}
		case kindRepeated:
			k, ok := f.size(w, m)
			if !ok {
				return 0, false
			}
			n += k
		}
	}
	return n, true
}

// write appends m, which size has measured; false if a status cannot be
// marshalled.
func (d *msgDesc[T]) write(w *msgWriter, b []byte, m *T) ([]byte, bool) {
	for i := range d.fields {
		f := &d.fields[i]
		switch f.kind {
		case kindEnum:
			if v := f.getEnum(m); v != 0 {
				b = append(b, f.tag)
				b = protowire.AppendVarint(b, uint64(v))
			}
		case kindBytes:
			if v := f.getBytes(m); len(v) > 0 {
				b = append(b, f.tag)
				b = protowire.AppendBytes(b, v)
			}
		case kindDigest:
			if d := f.getDigest(m); d != nil {
				b = appendDigestField(b, f.tag, d)
			}
		case kindDigests:
			for _, d := range f.getDigests(m) {
				b = appendDigestField(b, f.tag, d)
			}
		case kindStatus:
			if st := f.getStatus(m); st != nil {
				k := w.sizes[w.next]
				w.next++
				b = append(b, f.tag)
				b = protowire.AppendVarint(b, uint64(k))
				if k > 0 {
					var err error
					if b, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, st); err != nil {
						return b, false
					}
				}
			}
		case kindRepeated:
			var ok bool
			if b, ok = f.write(w, b, m); !ok {
				return b, false
			}
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
