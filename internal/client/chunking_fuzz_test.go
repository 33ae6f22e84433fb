package client

import (
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

// FuzzCheckMapping feeds checkMapping chunk lists as a server's
// GetChunkMapping response carries them: it never panics, and a list it
// accepts has valid chunks that add up to the blob's size.
func FuzzCheckMapping(f *testing.F) {
	a, b := digest.Compute(digest.SHA256, []byte("a")), digest.Compute(digest.SHA256, []byte("bc"))
	seed, _ := proto.Marshal(&repb.GetChunkMappingResponse{ChunkDigests: []*repb.Digest{a.Proto(), b.Proto()}})
	f.Add(seed, int64(3))
	f.Add([]byte{}, int64(0))
	f.Add([]byte{0x0a, 0x02, 0x10, 0x05}, int64(5))
	f.Fuzz(func(t *testing.T, data []byte, size int64) {
		var resp repb.GetChunkMappingResponse
		if proto.Unmarshal(data, &resp) != nil {
			return
		}
		d := digest.Digest{Function: digest.SHA256, Hash: a.Hash, Size: size}
		chunks, err := checkMapping(d, resp.ChunkDigests)
		if err != nil {
			return
		}
		var total int64
		for _, c := range chunks {
			if c.Size < 0 || c.Size > maxChunkSize || c.Function != digest.SHA256 {
				t.Fatalf("accepted chunk %v", c)
			}
			total += c.Size
		}
		if total != size || len(chunks) > maxMappingChunks {
			t.Fatalf("accepted %d chunks of %d bytes for a blob of %d", len(chunks), total, size)
		}
	})
}
