package invocation

import (
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/gantry-build/gantry/internal/protocol"
)

// FuzzFromHeaders feeds arbitrary bytes as the RequestMetadata header (it
// comes from clients) and derives every key: no panic, one key per
// extractor.
func FuzzFromHeaders(f *testing.F) {
	f.Add([]byte{0x0a, 0x03, 'a', 'b', 'c'}, "user-1")
	f.Add([]byte("\xff\xfe garbage"), "")
	ex, err := ParseAll(Default)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, meta []byte, user string) {
		r := &Request{UserHeader: DefaultUserHeader}
		r.FromHeaders(metadata.Pairs(protocol.RequestMetadataHeader, string(meta), DefaultUserHeader, user))
		if got := Keys(ex, r); len(got) != len(ex) {
			t.Fatalf("%d keys for %d extractors", len(got), len(ex))
		}
	})
}
