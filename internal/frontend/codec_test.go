package frontend

import (
	"bytes"
	"fmt"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

func TestCodecMatchesProto(t *testing.T) {
	if _, ok := encoding.GetCodecV2("proto").(codec); !ok {
		t.Fatalf("the registered proto codec is %T, not frontend's", encoding.GetCodecV2("proto"))
	}
	c := encoding.GetCodecV2("proto")
	var msgs []proto.Message
	for _, n := range []int{0, 1, 127, 128, 16383, 16384, 1 << 20, 3<<20 + 1} {
		msgs = append(msgs, &bspb.ReadResponse{Data: randomBlob(fmt.Sprint("codec", n), n)})
	}
	withUnknown := &bspb.ReadResponse{Data: []byte("data")}
	withUnknown.ProtoReflect().SetUnknown([]byte{0x08, 0x01}) // field 1 = 1
	msgs = append(msgs,
		withUnknown,
		&bspb.WriteRequest{ResourceName: "uploads/u/blobs/x/1", WriteOffset: 5, Data: []byte("abc"), FinishWrite: true},
		&repb.FindMissingBlobsRequest{InstanceName: "i", BlobDigests: []*repb.Digest{{Hash: "h", SizeBytes: 3}}},
	)
	for _, m := range msgs {
		t.Run(fmt.Sprintf("%T/%d", m, proto.Size(m)), func(t *testing.T) {
			want, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			bs, err := c.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got := bs.Materialize()
			bs.Free()
			if !bytes.Equal(got, want) {
				t.Fatalf("codec wrote %d bytes that differ from proto.Marshal's %d", len(got), len(want))
			}
			back := m.ProtoReflect().New().Interface()
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(got)}, back); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(back, m) {
				t.Error("round trip changed the message")
			}
		})
	}
}
