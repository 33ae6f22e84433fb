package chunkmap

import (
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/digest"
)

// FuzzDecode feeds Decode arbitrary lists: it never panics, and what it
// accepts describes a blob of the size asked for and encodes back to a
// list that decodes the same.
func FuzzDecode(f *testing.F) {
	a, b := digest.Compute(digest.SHA256, []byte("a")), digest.Compute(digest.SHA256, []byte("bc"))
	f.Add(Encode(Mapping{Function: repb.ChunkingFunction_FAST_CDC_2020, Chunks: []digest.Digest{a, b}}), int64(3))
	f.Add(Encode(Mapping{}), int64(0))
	f.Add([]byte{0x0a, 0x02, 0x10, 0x05}, int64(5))
	f.Fuzz(func(t *testing.T, data []byte, size int64) {
		m, err := Decode(digest.SHA256, size, data)
		if err != nil {
			return
		}
		if m.Size() != size || len(m.Chunks) > MaxChunks {
			t.Fatalf("accepted %d chunks of %d bytes for a blob of %d", len(m.Chunks), m.Size(), size)
		}
		again, err := Decode(digest.SHA256, size, Encode(m))
		if err != nil || again.Function != m.Function || len(again.Chunks) != len(m.Chunks) {
			t.Fatalf("re-encoded mapping decodes to %+v, %v", again, err)
		}
	})
}
