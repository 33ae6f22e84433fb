// Package chunkmap keeps chunk mappings: which CAS chunks, concatenated,
// make up a blob (REAPI GetChunkMapping and RegisterChunkMapping). A
// mapping is kept like an ActionCache entry: durable, and a miss as soon
// as any of its chunks has left the CAS.
package chunkmap

import (
	"fmt"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

// MaxChunks bounds the chunks of one mapping: 262,144 chunks of REAPI's
// recommended 512 KiB make a 128 GiB blob.
const MaxChunks = 1 << 18

// Mapping is how one blob splits into chunks.
type Mapping struct {
	// Function is the chunking function that cut the chunks, UNKNOWN
	// when a client registered them without naming one.
	Function repb.ChunkingFunction_Value
	// Chunks are the chunks' digests in blob order.
	Chunks []digest.Digest
}

// Size is the sum of the chunks' sizes.
func (m Mapping) Size() int64 {
	var n int64
	for _, c := range m.Chunks {
		n += c.Size
	}
	return n
}

// Encode serializes m as a SplitBlobResponse, the list a CAS blob holds.
func Encode(m Mapping) []byte {
	msg := &repb.SplitBlobResponse{ChunkingFunction: m.Function, ChunkDigests: make([]*repb.Digest, len(m.Chunks))}
	for i, c := range m.Chunks {
		msg.ChunkDigests[i] = c.Proto()
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		panic(fmt.Sprintf("encoding a chunk mapping: %v", err)) // only on invalid UTF-8, which hex digests never hold
	}
	return data
}

// Decode parses a list Encode wrote for a blob of blobSize bytes under
// digest function fn, and checks that it describes such a blob: at most
// MaxChunks valid digests whose sizes add up to blobSize.
func Decode(fn digest.Function, blobSize int64, data []byte) (Mapping, error) {
	var msg repb.SplitBlobResponse
	if err := proto.Unmarshal(data, &msg); err != nil {
		return Mapping{}, fmt.Errorf("chunk mapping does not parse: %w", err)
	}
	if _, ok := repb.ChunkingFunction_Value_name[int32(msg.ChunkingFunction)]; !ok {
		return Mapping{}, fmt.Errorf("chunk mapping names chunking function %d, which REAPI does not define", msg.ChunkingFunction)
	}
	if len(msg.ChunkDigests) > MaxChunks {
		return Mapping{}, fmt.Errorf("chunk mapping has %d chunks, more than %d", len(msg.ChunkDigests), MaxChunks)
	}
	m := Mapping{Function: msg.ChunkingFunction, Chunks: make([]digest.Digest, len(msg.ChunkDigests))}
	var total int64
	for i, pd := range msg.ChunkDigests {
		d, err := digest.FromProto(fn, pd)
		if err != nil {
			return Mapping{}, fmt.Errorf("chunk mapping entry %d: %w", i, err)
		}
		if total += d.Size; total > blobSize {
			return Mapping{}, fmt.Errorf("chunk mapping's chunks exceed the blob's %d bytes at entry %d", blobSize, i)
		}
		m.Chunks[i] = d
	}
	if total != blobSize {
		return Mapping{}, fmt.Errorf("chunk mapping's chunks add up to %d bytes, not the blob's %d", total, blobSize)
	}
	return m, nil
}
