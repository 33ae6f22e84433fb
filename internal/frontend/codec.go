package frontend

import (
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// codec is gRPC's proto codec with one shortcut: a ByteStream
// ReadResponse is sent as a few header bytes followed by its data, rather
// than copied whole into a new buffer. Reads move megabytes per message,
// and the copy (with the allocation and zeroing of a fresh buffer above
// gRPC's pooling sizes) was a large share of their cost. The bytes on the
// wire are the same as proto.Marshal's. Everything else goes to the
// standard codec.
//
// The Read handler never changes a ReadResponse's data after sending it,
// which is what makes handing gRPC the slice itself safe.
type codec struct{ std encoding.CodecV2 }

// readResponseData is the field number of ReadResponse.data.
const readResponseData = 10

func init() {
	// Registering under "proto" makes it the codec of every gRPC server
	// and client in the process; it is transparent to all of them.
	encoding.RegisterCodecV2(codec{std: encoding.GetCodecV2("proto")})
}

func (codec) Name() string { return "proto" }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*bspb.ReadResponse); ok && len(r.Data) > 0 && len(r.ProtoReflect().GetUnknown()) == 0 {
		hdr := make([]byte, 0, 1+protowire.SizeVarint(uint64(len(r.Data))))
		hdr = protowire.AppendTag(hdr, readResponseData, protowire.BytesType)
		hdr = protowire.AppendVarint(hdr, uint64(len(r.Data)))
		return mem.BufferSlice{mem.SliceBuffer(hdr), mem.SliceBuffer(r.Data)}, nil
	}
	return c.std.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.std.Unmarshal(data, v) }
