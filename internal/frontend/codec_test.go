package frontend

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func TestCodecMatchesProto(t *testing.T) {
	if _, ok := encoding.GetCodecV2("proto").(codec); ok {
		t.Fatal("the frontend's codec is registered as every gRPC client's and server's; it is meant only for the servers that install it (ServerCodec)")
	}
	c := Codec()
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
	// The response encoders: plain messages, and ones they leave to proto.
	h := strings.Repeat("cd", 32)
	fm := &repb.FindMissingBlobsResponse{}
	bu := &repb.BatchUpdateBlobsResponse{}
	br := &repb.BatchReadBlobsResponse{}
	for i := range 3000 {
		fm.MissingBlobDigests = append(fm.MissingBlobDigests, &repb.Digest{Hash: h[:i%65], SizeBytes: int64(i*i*i) - 5})
		r := &repb.BatchUpdateBlobsResponse_Response{Digest: &repb.Digest{Hash: h, SizeBytes: int64(i)}, Status: &rpcstatus.Status{}}
		switch i % 7 {
		case 1:
			r.Status = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "bad blob"}
		case 2:
			r.Status = &rpcstatus.Status{Code: -1}
		case 3:
			r.Digest = nil
		case 4:
			r.Status = nil
		case 5:
			r.Digest = &repb.Digest{}
		}
		bu.Responses = append(bu.Responses, r)
		rr := &repb.BatchReadBlobsResponse_Response{Digest: r.Digest, Status: r.Status, Data: randomBlob(fmt.Sprint("br", i), i%200*(i%3))}
		switch i % 5 {
		case 1:
			rr.Compressor = repb.Compressor_ZSTD
		case 2:
			rr.Compressor = -3
		}
		br.Responses = append(br.Responses, rr)
	}
	odd := &repb.Digest{Hash: "x"}
	odd.ProtoReflect().SetUnknown([]byte{0x18, 0x01})
	withDetails, _ := status.New(codes.Internal, "x").WithDetails(&repb.Digest{Hash: "y"})
	msgs = append(msgs, fm, bu, br,
		&repb.BatchReadBlobsResponse{},
		&repb.BatchReadBlobsResponse{Responses: []*repb.BatchReadBlobsResponse_Response{{Digest: odd}}},
		&repb.BatchReadBlobsResponse{Responses: []*repb.BatchReadBlobsResponse_Response{{Status: withDetails.Proto(), Data: []byte("x")}}},
		&repb.FindMissingBlobsResponse{},
		&repb.BatchUpdateBlobsResponse{},
		&repb.FindMissingBlobsResponse{MissingBlobDigests: []*repb.Digest{odd}},
		&repb.BatchUpdateBlobsResponse{Responses: []*repb.BatchUpdateBlobsResponse_Response{{Digest: odd}}},
		&repb.BatchUpdateBlobsResponse{Responses: []*repb.BatchUpdateBlobsResponse_Response{{Status: withDetails.Proto()}}},
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

// decoderCases are the request types the codec decodes itself, each with
// a constructor of an empty message.
var decoderCases = []func() proto.Message{
	func() proto.Message { return &bspb.WriteRequest{} },
	func() proto.Message { return &repb.FindMissingBlobsRequest{} },
	func() proto.Message { return &repb.BatchUpdateBlobsRequest{} },
	func() proto.Message { return &repb.BatchReadBlobsRequest{} },
}

// splitBuffers cuts data into buffers at points drawn from seed, as gRPC
// hands a message over in frame-sized pieces.
func splitBuffers(data []byte, seed uint64) mem.BufferSlice {
	var bs mem.BufferSlice
	for len(data) > 0 {
		seed = seed*6364136223846793005 + 1442695040888963407
		n := 1 + int(seed>>33)%max(1, len(data))
		if seed&(1<<20) != 0 {
			n = 1 + int(seed>>40)%17 // many tiny pieces now and then
		}
		n = min(n, len(data))
		bs = append(bs, mem.SliceBuffer(data[:n]))
		data = data[n:]
	}
	return bs
}

// checkDecoder decodes data as kind with the codec (split into buffers)
// and with proto.Unmarshal, and fails unless both give the same.
func checkDecoder(t *testing.T, kind int, data []byte, seed uint64) {
	if kind == 0 {
		checkWriteDecoder(t, data, seed)
		return
	}
	c := Codec()
	want := decoderCases[kind]()
	wantErr := proto.Unmarshal(data, want)
	in := bytes.Clone(data)
	got := decoderCases[kind]()
	gotErr := c.Unmarshal(splitBuffers(in, seed), got)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("%T from %x: codec error %v, proto error %v", got, data, gotErr, wantErr)
	}
	if wantErr != nil {
		return
	}
	// The message must not alias gRPC's buffers, which are reused.
	for i := range in {
		in[i] = 0xa5
	}
	if !proto.Equal(got, want) {
		t.Fatalf("%T from %x: codec gave %v, proto %v", got, data, got, want)
	}
	opts := proto.MarshalOptions{Deterministic: true}
	gb, err1 := opts.Marshal(got)
	wb, err2 := opts.Marshal(want)
	if err1 != nil || err2 != nil || !bytes.Equal(gb, wb) {
		t.Fatalf("%T from %x: re-encoded differently (%v, %v)", got, data, err1, err2)
	}
	// proto leaves empty bytes fields nil; so must the codec.
	switch g := got.(type) {
	case *repb.BatchUpdateBlobsRequest:
		for i, r := range g.Requests {
			w := want.(*repb.BatchUpdateBlobsRequest).Requests[i]
			if (r.Data == nil) != (w.Data == nil) || (r.Digest == nil) != (w.Digest == nil) {
				t.Fatalf("BatchUpdateBlobsRequest from %x: request %d differs in nil-ness", data, i)
			}
		}
	case *repb.FindMissingBlobsRequest:
		for i, d := range g.BlobDigests {
			if (d == nil) != (want.(*repb.FindMissingBlobsRequest).BlobDigests[i] == nil) {
				t.Fatalf("FindMissingBlobsRequest from %x: digest %d differs in nil-ness", data, i)
			}
		}
	case *repb.BatchReadBlobsRequest:
		if w := want.(*repb.BatchReadBlobsRequest); (g.AcceptableCompressors == nil) != (w.AcceptableCompressors == nil) {
			t.Fatalf("BatchReadBlobsRequest from %x: acceptable_compressors differ in nil-ness", data)
		}
	}
}

// trackingPool hands out reference-counted buffers as gRPC's receive path
// does, poisons each buffer returned to it, and counts those not returned.
type trackingPool struct{ out int }

func (p *trackingPool) Get(n int) *[]byte {
	p.out++
	b := make([]byte, n, max(n, 4096)) // above gRPC's pooling threshold
	return &b
}

func (p *trackingPool) Put(b *[]byte) {
	p.out--
	for i := range (*b)[:cap(*b)] {
		(*b)[:cap(*b)][i] = 0xa5
	}
}

// split is splitBuffers with the pieces copied into buffers of p.
func (p *trackingPool) split(data []byte, seed uint64) mem.BufferSlice {
	var bs mem.BufferSlice
	for _, piece := range splitBuffers(data, seed) {
		b := p.Get(piece.Len())
		copy(*b, piece.ReadOnlyData())
		bs = append(bs, mem.NewBuffer(b, p))
	}
	return bs
}

// checkWriteDecoder decodes data as a WriteRequest with the codec, as the
// Write handler receives it (a writeMsg), and with proto.Unmarshal, and
// fails unless both give the same. The codec must hold the buffers the
// data lies in after gRPC frees its own references, release every buffer
// once the message is freed, and copy nothing it did not hold.
func checkWriteDecoder(t *testing.T, data []byte, seed uint64) {
	want := &bspb.WriteRequest{}
	wantErr := proto.Unmarshal(data, want)
	pool := &trackingPool{}
	bufs := pool.split(data, seed)
	got := &writeMsg{}
	gotErr := Codec().Unmarshal(bufs, got)
	bufs.Free() // what gRPC does once Unmarshal returns
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("WriteRequest from %x: codec error %v, proto error %v", data, gotErr, wantErr)
	}
	if wantErr != nil {
		if pool.out != 0 {
			t.Fatalf("WriteRequest from %x: %d buffers held after a failed decode", data, pool.out)
		}
		return
	}
	var joined []byte
	for _, b := range got.data {
		joined = append(joined, b...)
	}
	if got.resourceName != want.ResourceName || got.writeOffset != want.WriteOffset || got.finishWrite != want.FinishWrite ||
		got.n != len(want.Data) || !bytes.Equal(joined, want.Data) || got.GetResourceName() != want.ResourceName || got.DataLen() != len(want.Data) {
		t.Fatalf("WriteRequest from %x: codec gave %q %d %v %d bytes %x, proto %v", data, got.resourceName, got.writeOffset, got.finishWrite, got.n, joined, want)
	}
	if len(got.held) > len(got.data) {
		t.Fatalf("WriteRequest from %x: %d buffers held for %d pieces of data", data, len(got.held), len(got.data))
	}
	got.skip(int64(seed % uint64(len(want.Data)+2)))
	joined = joined[:0]
	for _, b := range got.data {
		joined = append(joined, b...)
	}
	if k := min(int(seed%uint64(len(want.Data)+2)), len(want.Data)); !bytes.Equal(joined, want.Data[k:]) || got.n != len(want.Data)-k {
		t.Fatalf("WriteRequest from %x: skipping %d bytes left %x (n %d)", data, k, joined, got.n)
	}
	got.free()
	got.free() // twice is harmless
	if pool.out != 0 {
		t.Fatalf("WriteRequest from %x: %d buffers not released after free", data, pool.out)
	}
}

// decoderSeeds are well-formed messages of each decoded kind, and a few
// that take proto's path (unknown fields, repeated singular fields).
func decoderSeeds() (kinds []int, msgs [][]byte) {
	add := func(kind int, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		kinds, msgs = append(kinds, kind), append(msgs, b)
	}
	h := strings.Repeat("ab", 32)
	add(0, &bspb.WriteRequest{})
	add(0, &bspb.WriteRequest{ResourceName: "uploads/u/blobs/" + h + "/3", WriteOffset: 5, FinishWrite: true, Data: []byte("abc")})
	add(0, &bspb.WriteRequest{WriteOffset: -1, Data: bytes.Repeat([]byte{7}, 20000)})
	add(1, &repb.FindMissingBlobsRequest{})
	add(1, &repb.FindMissingBlobsRequest{InstanceName: "main", DigestFunction: repb.DigestFunction_SHA256,
		BlobDigests: []*repb.Digest{{Hash: h, SizeBytes: 3}, {}, {Hash: "x", SizeBytes: -2}}})
	add(2, &repb.BatchUpdateBlobsRequest{})
	add(2, &repb.BatchUpdateBlobsRequest{InstanceName: "i/j", DigestFunction: repb.DigestFunction_BLAKE3,
		Requests: []*repb.BatchUpdateBlobsRequest_Request{
			{Digest: &repb.Digest{Hash: h, SizeBytes: 3}, Data: []byte("abc")},
			{Digest: &repb.Digest{}, Compressor: repb.Compressor_ZSTD},
			{},
			{Data: bytes.Repeat([]byte{1}, 5000)},
		}})
	add(3, &repb.BatchReadBlobsRequest{})
	add(3, &repb.BatchReadBlobsRequest{InstanceName: "main", DigestFunction: repb.DigestFunction_SHA256,
		Digests:               []*repb.Digest{{Hash: h, SizeBytes: 3}, {}, {Hash: "x", SizeBytes: -2}},
		AcceptableCompressors: []repb.Compressor_Value{repb.Compressor_ZSTD, repb.Compressor_DEFLATE, -1}})
	// acceptable_compressors unpacked, as a proto2-minded encoder may send it.
	unpacked := protowire.AppendTag(nil, 3, protowire.VarintType)
	unpacked = protowire.AppendVarint(unpacked, uint64(repb.Compressor_ZSTD))
	kinds, msgs = append(kinds, 3), append(msgs, append(append([]byte{}, msgs[len(msgs)-1]...), unpacked...))
	for kind := range decoderCases {
		base := msgs[len(msgs)-1]
		for i := range msgs {
			if kinds[i] == kind {
				base = msgs[i]
			}
		}
		unknown := protowire.AppendTag(bytes.Clone(base), 99, protowire.VarintType)
		unknown = protowire.AppendVarint(unknown, 1)
		kinds, msgs = append(kinds, kind), append(msgs, unknown)
		twice := append(bytes.Clone(base), base...) // every field twice
		kinds, msgs = append(kinds, kind), append(msgs, twice)
		kinds, msgs = append(kinds, kind), append(msgs, base[:len(base)/2])
		kinds, msgs = append(kinds, kind), append(msgs, []byte{0x0a, 0x02, 0xff, 0xfe}) // bad UTF-8
	}
	return kinds, msgs
}

func TestDecodersMatchProto(t *testing.T) {
	kinds, msgs := decoderSeeds()
	for i, data := range msgs {
		for seed := uint64(0); seed < 50; seed++ {
			checkDecoder(t, kinds[i], data, seed)
		}
	}
}

// TestDecodersTakeFastPath makes sure the codec's own decoders accept what
// clients send (otherwise TestDecodersMatchProto would only test proto).
func TestDecodersTakeFastPath(t *testing.T) {
	h := strings.Repeat("0f", 32)
	wr, _ := proto.Marshal(&bspb.WriteRequest{ResourceName: "uploads/u/blobs/" + h + "/3", WriteOffset: 1 << 40, FinishWrite: true, Data: []byte("abc")})
	if !decodeWriteMsg(splitBuffers(wr, 1), &writeMsg{}) {
		t.Error("WriteRequest took proto's path")
	}
	fm := &repb.FindMissingBlobsRequest{InstanceName: "x"}
	bu := &repb.BatchUpdateBlobsRequest{InstanceName: "x"}
	for i := range 1000 {
		fm.BlobDigests = append(fm.BlobDigests, &repb.Digest{Hash: h, SizeBytes: int64(i)})
		bu.Requests = append(bu.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: &repb.Digest{Hash: h, SizeBytes: 3}, Data: []byte("abc")})
	}
	fb, _ := proto.Marshal(fm)
	if !decodeFindMissing(splitBuffers(fb, 2), &repb.FindMissingBlobsRequest{}) {
		t.Error("FindMissingBlobsRequest took proto's path")
	}
	bb, _ := proto.Marshal(bu)
	if !decodeBatchUpdate(splitBuffers(bb, 3), &repb.BatchUpdateBlobsRequest{}) {
		t.Error("BatchUpdateBlobsRequest took proto's path")
	}
	br, _ := proto.Marshal(&repb.BatchReadBlobsRequest{InstanceName: "x", Digests: fm.BlobDigests,
		AcceptableCompressors: []repb.Compressor_Value{repb.Compressor_ZSTD}, DigestFunction: repb.DigestFunction_SHA256})
	if !decodeBatchRead(splitBuffers(br, 4), &repb.BatchReadBlobsRequest{}) {
		t.Error("BatchReadBlobsRequest took proto's path")
	}
}

// FuzzDecoders checks the codec's decoders against proto.Unmarshal on
// arbitrary input: go test -fuzz FuzzDecoders ./internal/frontend/
func FuzzDecoders(f *testing.F) {
	kinds, msgs := decoderSeeds()
	for i, data := range msgs {
		f.Add(uint8(kinds[i]), uint64(i), data)
	}
	f.Fuzz(func(t *testing.T, kind uint8, seed uint64, data []byte) {
		checkDecoder(t, int(kind)%len(decoderCases), data, seed)
	})
}
