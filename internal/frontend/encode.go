package frontend

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"

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
// (msgDesc): its fields in number order, each a tag, a kind and where the
// field lies in the Go struct. The descriptions are resolved once, at
// init, against the generated types (by field name, checking each
// field's Go type against its kind), so the writer does no reflection and
// no interface calls per field. Encoding another message is one more
// description.
//
// The writer takes only the messages the handlers build: no unknown
// fields in the described messages, no nil entries in repeated fields.
// For anything else it reports false and the standard codec does it.

// fieldKind is how a field is stored and encoded.
type fieldKind uint8

const (
	kindEnum     fieldKind = iota // int32 enum, varint (sign-extended), absent when 0
	kindBytes                     // []byte, length-delimited, absent when empty
	kindDigest                    // *repb.Digest, absent when nil
	kindDigests                   // []*repb.Digest, none nil
	kindStatus                    // *rpcstatus.Status, absent when nil; through proto unless plain OK
	kindRepeated                  // []*M described by sub, none nil
)

// fieldDesc is one field of a msgDesc.
type fieldDesc struct {
	tag  byte // field number << 3 | wire type (numbers below 16)
	kind fieldKind
	off  uintptr // offset of the Go field in the message struct
	sub  *msgDesc
}

// msgDesc describes the fields of one generated message type.
type msgDesc struct {
	typ     reflect.Type // the message struct, for checking descriptions at init
	unknown uintptr      // offset of the message's unknown fields ([]byte)
	fields  []fieldDesc
}

// fieldSpec is a field of a description before it is resolved: number, Go
// field name, kind and, for messages, the description of the submessage.
type fieldSpec struct {
	num  protowire.Number
	name string
	kind fieldKind
	sub  *msgDesc
}

// describe resolves the description of the message type of v (a
// pointer). It panics on a field that does not exist or whose Go type
// does not fit its kind: a mistake in a description, found by any test.
func describe(v proto.Message, fields ...fieldSpec) *msgDesc {
	t := reflect.TypeOf(v).Elem()
	d := &msgDesc{typ: t, unknown: structField(t, "unknownFields", reflect.TypeOf([]byte(nil))).Offset}
	want := map[fieldKind]reflect.Type{
		kindBytes:   reflect.TypeOf([]byte(nil)),
		kindDigest:  reflect.TypeOf((*repb.Digest)(nil)),
		kindDigests: reflect.TypeOf([]*repb.Digest(nil)),
		kindStatus:  reflect.TypeOf((*rpcstatus.Status)(nil)),
	}
	for i, f := range fields {
		if f.num >= 16 || (i > 0 && f.num <= fields[i-1].num) {
			panic(fmt.Sprintf("frontend: %s.%s: field numbers must rise and stay below 16", t.Name(), f.name))
		}
		var sf reflect.StructField
		wt := protowire.BytesType
		switch f.kind {
		case kindEnum:
			sf = structField(t, f.name, nil)
			if sf.Type.Kind() != reflect.Int32 {
				panic(fmt.Sprintf("frontend: %s.%s is %s, not an enum", t.Name(), f.name, sf.Type))
			}
			wt = protowire.VarintType
		case kindRepeated:
			sf = structField(t, f.name, reflect.SliceOf(reflect.PointerTo(f.sub.typ)))
		default:
			sf = structField(t, f.name, want[f.kind])
		}
		d.fields = append(d.fields, fieldDesc{tag: byte(protowire.EncodeTag(f.num, wt)), kind: f.kind, off: sf.Offset, sub: f.sub})
	}
	return d
}

// structField is t's field name, which must be of type want (any type if
// want is nil).
func structField(t reflect.Type, name string, want reflect.Type) reflect.StructField {
	sf, ok := t.FieldByName(name)
	if !ok || len(sf.Index) != 1 || (want != nil && sf.Type != want) {
		panic(fmt.Sprintf("frontend: %s has no field %s of type %v", t.Name(), name, want))
	}
	return sf
}

// The messages the codec encodes itself.
var (
	findMissingResponseDesc = describe(&repb.FindMissingBlobsResponse{},
		fieldSpec{2, "MissingBlobDigests", kindDigests, nil})
	batchUpdateResponseDesc = describe(&repb.BatchUpdateBlobsResponse{},
		fieldSpec{1, "Responses", kindRepeated, describe(&repb.BatchUpdateBlobsResponse_Response{},
			fieldSpec{1, "Digest", kindDigest, nil},
			fieldSpec{2, "Status", kindStatus, nil})})
	batchReadResponseDesc = describe(&repb.BatchReadBlobsResponse{},
		fieldSpec{1, "Responses", kindRepeated, describe(&repb.BatchReadBlobsResponse_Response{},
			fieldSpec{1, "Digest", kindDigest, nil},
			fieldSpec{2, "Data", kindBytes, nil},
			fieldSpec{3, "Status", kindStatus, nil},
			fieldSpec{4, "Compressor", kindEnum, nil})})
)

// encodeResponse writes v as proto.Marshal would if it is a response the
// codec encodes itself and the writer takes it.
func encodeResponse(v any) (mem.BufferSlice, bool) {
	switch m := v.(type) {
	case *repb.FindMissingBlobsResponse:
		return encodeMessage(findMissingResponseDesc, unsafe.Pointer(m))
	case *repb.BatchUpdateBlobsResponse:
		return encodeMessage(batchUpdateResponseDesc, unsafe.Pointer(m))
	case *repb.BatchReadBlobsResponse:
		return encodeMessage(batchReadResponseDesc, unsafe.Pointer(m))
	}
	return nil, false
}

// encodeMessage writes the message at p, described by d, as
// proto.Marshal would, into one buffer (pooled if large); false if the
// writer does not take it (see above).
func encodeMessage(d *msgDesc, p unsafe.Pointer) (mem.BufferSlice, bool) {
	w := msgWriters.Get().(*msgWriter)
	defer w.release()
	n, ok := w.size(d, p)
	if !ok {
		return nil, false
	}
	b, ok := w.write(encodedBuffer(n), d, p)
	if !ok {
		return nil, false
	}
	return wrapEncoded(b), true
}

// msgWriter encodes a message in two passes: size measures every
// submessage once, in the order write then meets them, and keeps their
// lengths for write, which so never measures a message again.
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

// size is the encoded length of the message at p, described by d; false
// if it has unknown fields or nil entries, or holds a message that does.
func (w *msgWriter) size(d *msgDesc, p unsafe.Pointer) (int, bool) {
	if len(*(*[]byte)(unsafe.Add(p, d.unknown))) != 0 {
		return 0, false
	}
	n := 0
	for i := range d.fields {
		f := &d.fields[i]
		q := unsafe.Add(p, f.off)
		switch f.kind {
		case kindEnum:
			if v := *(*int32)(q); v != 0 {
				n += 1 + protowire.SizeVarint(uint64(v))
			}
		case kindBytes:
			if k := len(*(*[]byte)(q)); k > 0 {
				n += 1 + protowire.SizeBytes(k)
			}
		case kindDigest:
			if d := *(**repb.Digest)(q); d != nil {
				if !plainDigest(d) {
					return 0, false
				}
				n += 1 + protowire.SizeBytes(digestLen(d))
			}
		case kindDigests:
			for _, d := range *(*[]*repb.Digest)(q) {
				if d == nil || !plainDigest(d) {
					return 0, false
				}
				n += 1 + protowire.SizeBytes(digestLen(d))
			}
		case kindStatus:
			if st := *(**rpcstatus.Status)(q); st != nil {
				k := statusLen(st)
				w.sizes = append(w.sizes, k)
				n += 1 + protowire.SizeBytes(k)
			}
		case kindRepeated:
			for _, s := range *(*[]unsafe.Pointer)(q) {
				if s == nil {
					return 0, false
				}
				k, ok := w.sizeSub(f.sub, s)
				if !ok {
					return 0, false
				}
				n += 1 + protowire.SizeBytes(k)
			}
		}
	}
	return n, true
}

// sizeSub is size for a submessage, whose length it records.
func (w *msgWriter) sizeSub(d *msgDesc, p unsafe.Pointer) (int, bool) {
	i := len(w.sizes)
	w.sizes = append(w.sizes, 0)
	k, ok := w.size(d, p)
	w.sizes[i] = k
	return k, ok
}

// write appends the message at p, described by d, which size has
// measured; false if a status cannot be marshalled.
func (w *msgWriter) write(b []byte, d *msgDesc, p unsafe.Pointer) ([]byte, bool) {
	for i := range d.fields {
		f := &d.fields[i]
		q := unsafe.Add(p, f.off)
		switch f.kind {
		case kindEnum:
			if v := *(*int32)(q); v != 0 {
				b = append(b, f.tag)
				b = protowire.AppendVarint(b, uint64(v))
			}
		case kindBytes:
			if v := *(*[]byte)(q); len(v) > 0 {
				b = append(b, f.tag)
				b = protowire.AppendBytes(b, v)
			}
		case kindDigest:
			if d := *(**repb.Digest)(q); d != nil {
				b = appendDigestField(b, f.tag, d)
			}
		case kindDigests:
			for _, d := range *(*[]*repb.Digest)(q) {
				b = appendDigestField(b, f.tag, d)
			}
		case kindStatus:
			if st := *(**rpcstatus.Status)(q); st != nil {
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
			for _, s := range *(*[]unsafe.Pointer)(q) {
				var ok bool
				if b, ok = w.writeSub(b, f.tag, f.sub, s); !ok {
					return b, false
				}
			}
		}
	}
	return b, true
}

// writeSub appends the submessage at p as a field under tag: tag, length
// (as size recorded it), message.
func (w *msgWriter) writeSub(b []byte, tag byte, d *msgDesc, p unsafe.Pointer) ([]byte, bool) {
	k := w.sizes[w.next]
	w.next++
	b = append(b, tag)
	b = protowire.AppendVarint(b, uint64(k))
	return w.write(b, d, p)
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
