package asset

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"testing"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
)

// BenchmarkFetchBlob measures a download from a loopback origin into the
// memory CAS (64 MiB: spooled through a temporary file, hashed for the
// digest and for checksum.sri), each iteration a new URI so none is
// cached.
func BenchmarkFetchBlob(b *testing.B) {
	body := make([]byte, 64<<20)
	rand.New(rand.NewSource(1)).Read(body)
	o := newOrigin(b, func(w http.ResponseWriter, _ *http.Request) { w.Write(body) })
	fx := newFixture(b, func(c *FetcherConfig) { c.MaxSize = 1 << 30 })
	sum := q("checksum.sri", sri(body))
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := range b.N {
		req := &rapb.FetchBlobRequest{Uris: []string{fmt.Sprintf("%s/dep-%d", o.URL, i)}, Qualifiers: []*rapb.Qualifier{sum}}
		if _, err := fx.svc.FetchBlob(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFetchBlobCached measures an answer from the index (the
// ActionCache lookup and the CAS check), no origin contacted.
func BenchmarkFetchBlobCached(b *testing.B) {
	o := newOrigin(b, serve([]byte("cached dependency")))
	fx := newFixture(b, nil)
	req := &rapb.FetchBlobRequest{Uris: []string{o.URL + "/dep"}, Qualifiers: []*rapb.Qualifier{q("checksum.sri", sri([]byte("cached dependency")))}}
	if _, err := fx.svc.FetchBlob(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := fx.svc.FetchBlob(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	if o.hits.Load() != 1 {
		b.Fatalf("origin hit %d times", o.hits.Load())
	}
}
