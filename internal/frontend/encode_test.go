package frontend

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// encoderCases are the response types the codec encodes itself.
var encoderCases = []func() proto.Message{
	func() proto.Message { return &repb.FindMissingBlobsResponse{} },
	func() proto.Message { return &repb.BatchUpdateBlobsResponse{} },
	func() proto.Message { return &repb.BatchReadBlobsResponse{} },
}

// randomResponse builds a response of encoderCases[kind] from r: digests,
// statuses, data and compressors of every size class the wire format
// distinguishes (empty, one-byte and multi-byte lengths and varints,
// negative enums and sizes), and absent fields.
func randomResponse(r *rand.Rand, kind int) proto.Message {
	h := strings.Repeat("9e", 64)
	varint := func() int64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return r.Int64N(128)
		case 2:
			return -r.Int64N(1 << 40)
		}
		return r.Int64() >> r.IntN(63)
	}
	dig := func() *repb.Digest {
		if r.IntN(6) == 0 {
			return nil
		}
		return &repb.Digest{Hash: h[:r.IntN(len(h)+1)], SizeBytes: varint()}
	}
	st := func() *rpcstatus.Status {
		switch r.IntN(5) {
		case 0:
			return nil
		case 1:
			return &rpcstatus.Status{Code: int32(varint())}
		case 2:
			return &rpcstatus.Status{Code: int32(r.IntN(17)), Message: h[:r.IntN(len(h))],
				Details: []*anypb.Any{{TypeUrl: "x/y", Value: []byte(h[:r.IntN(len(h))])}}}
		}
		return &rpcstatus.Status{}
	}
	data := func() []byte {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte{}
		}
		b := make([]byte, r.IntN(1<<r.IntN(15)))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	n := r.IntN(1 << r.IntN(12))
	switch kind {
	case 0:
		m := &repb.FindMissingBlobsResponse{}
		for range n {
			d := dig()
			if d == nil {
				d = &repb.Digest{}
			}
			m.MissingBlobDigests = append(m.MissingBlobDigests, d)
		}
		return m
	case 1:
		m := &repb.BatchUpdateBlobsResponse{}
		for range n {
			m.Responses = append(m.Responses, &repb.BatchUpdateBlobsResponse_Response{Digest: dig(), Status: st()})
		}
		return m
	}
	m := &repb.BatchReadBlobsResponse{}
	for range n {
		m.Responses = append(m.Responses, &repb.BatchReadBlobsResponse_Response{
			Digest: dig(), Data: data(), Status: st(), Compressor: repb.Compressor_Value(varint())})
	}
	return m
}

// checkEncoder encodes m, a response of encoderCases, with the codec and with
// proto.Marshal and fails unless both give the same bytes. It reports
// whether the table-driven writer took the message itself.
func checkEncoder(t *testing.T, m proto.Message) bool {
	t.Helper()
	want, wantErr := proto.Marshal(m)
	bs, err := Codec().Marshal(m)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%T: codec error %v, proto error %v", m, err, wantErr)
	}
	if err != nil {
		return false
	}
	got := bs.Materialize()
	bs.Free()
	if !bytes.Equal(got, want) {
		t.Fatalf("%T: codec wrote %d bytes that differ from proto.Marshal's %d\ncodec %x\nproto %x", m, len(got), len(want), got, want)
	}
	bs, ok := encodeResponse(m)
	bs.Free()
	return ok
}

// TestEncodersMatchProtoOnRandomMessages: for random responses of each
// kind the codec's writer gives proto.Marshal's bytes, and takes them
// itself (else the test would only test proto).
func TestEncodersMatchProtoOnRandomMessages(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 1))
	for kind := range encoderCases {
		taken := 0
		for i := range 300 {
			m := randomResponse(r, kind)
			t.Run(fmt.Sprintf("%T/%d", m, i), func(t *testing.T) {
				if checkEncoder(t, m) {
					taken++
				}
			})
		}
		if taken != 300 {
			t.Errorf("%T: the writer took %d of 300 plain messages", encoderCases[kind](), taken)
		}
	}
}

// TestEncodersLeaveOddMessagesToProto: a response whose message, entry
// or digest has unknown fields, or with a nil entry, is left to proto (the
// writer would drop the unknown fields), and the bytes are still
// proto.Marshal's.
func TestEncodersLeaveOddMessagesToProto(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 3))
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	for kind := range encoderCases {
		for i := range 100 {
			m := randomResponse(r, kind)
			parts := []protoreflect.Message{m.ProtoReflect()} // the messages that may carry unknown fields
			switch m := m.(type) {
			case *repb.FindMissingBlobsResponse:
				for _, d := range m.MissingBlobDigests {
					parts = append(parts, d.ProtoReflect())
				}
			case *repb.BatchUpdateBlobsResponse:
				for _, e := range m.Responses {
					parts = append(parts, e.ProtoReflect())
					if e.Digest != nil {
						parts = append(parts, e.Digest.ProtoReflect())
					}
				}
			case *repb.BatchReadBlobsResponse:
				for _, e := range m.Responses {
					parts = append(parts, e.ProtoReflect())
					if e.Digest != nil {
						parts = append(parts, e.Digest.ProtoReflect())
					}
				}
			}
			what := "unknown fields"
			if i%4 == 3 && len(parts) > 1 { // a nil entry instead
				what = "a nil entry"
				switch m := m.(type) {
				case *repb.FindMissingBlobsResponse:
					m.MissingBlobDigests[r.IntN(len(m.MissingBlobDigests))] = nil
				case *repb.BatchUpdateBlobsResponse:
					m.Responses[r.IntN(len(m.Responses))] = nil
				case *repb.BatchReadBlobsResponse:
					m.Responses[r.IntN(len(m.Responses))] = nil
				}
			} else {
				parts[r.IntN(len(parts))].SetUnknown(unknown)
			}
			t.Run(fmt.Sprintf("%T/%d", m, i), func(t *testing.T) {
				if checkEncoder(t, m) {
					t.Errorf("the writer took a message with %s", what)
				}
			})
		}
	}
}

// FuzzEncoders checks the codec's encoders against proto.Marshal on every
// response that arbitrary input decodes to: go test -fuzz FuzzEncoders
// ./internal/frontend/
func FuzzEncoders(f *testing.F) {
	r := rand.New(rand.NewPCG(37, 2))
	for kind := range encoderCases {
		for added := 0; added < 4; {
			b, err := proto.Marshal(randomResponse(r, kind))
			if err != nil {
				f.Fatal(err)
			}
			if len(b) < 1024 { // small inputs mutate fast
				f.Add(uint8(kind), b)
				added++
			}
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		m := encoderCases[int(kind)%len(encoderCases)]()
		if proto.Unmarshal(data, m) != nil {
			return
		}
		checkEncoder(t, m)
	})
}

// BenchmarkEncodeResponses is the writer alone on responses of the size
// the storage benchmarks send (10,000 digests, 1,000 1 KiB blobs).
func BenchmarkEncodeResponses(b *testing.B) {
	h := strings.Repeat("5a", 32)
	fm := &repb.FindMissingBlobsResponse{}
	bu := &repb.BatchUpdateBlobsResponse{}
	br := &repb.BatchReadBlobsResponse{}
	data := bytes.Repeat([]byte{1}, 1024)
	for i := range 10000 {
		d := &repb.Digest{Hash: h, SizeBytes: int64(1000 + i)}
		fm.MissingBlobDigests = append(fm.MissingBlobDigests, d)
		bu.Responses = append(bu.Responses, &repb.BatchUpdateBlobsResponse_Response{Digest: d, Status: &rpcstatus.Status{}})
		if i < 1000 {
			br.Responses = append(br.Responses, &repb.BatchReadBlobsResponse_Response{Digest: d, Data: data, Status: &rpcstatus.Status{}})
		}
	}
	c := Codec()
	for _, m := range []proto.Message{fm, bu, br} {
		b.Run(string(m.ProtoReflect().Descriptor().Name()), func(b *testing.B) {
			for b.Loop() {
				bs, err := c.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				bs.Free()
			}
		})
	}
}

// TestDescribeRejectsMistakes: a description whose field numbers are out
// of order or need a tag of more than one byte stops the program at init
// rather than writing wrong bytes. (A getter of the wrong type for its
// field does not compile.)
func TestDescribeRejectsMistakes(t *testing.T) {
	type R = repb.BatchReadBlobsResponse_Response
	data := bytesField(2, (*R).GetData)
	compressor := func(r *R) int32 { return int32(r.GetCompressor()) }
	for name, fields := range map[string][]field[R]{
		"out of order": {enumField(4, compressor), data},
		"repeated":     {data, data},
		"number 16":    {data, enumField(16, compressor)},
		"number 0":     {bytesField(0, (*R).GetData)},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("describe took it")
				}
			}()
			describe(fields...)
		})
	}
	describe(data, enumField(4, compressor))
}
