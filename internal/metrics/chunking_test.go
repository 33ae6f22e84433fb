package metrics

import (
	"bytes"
	"context"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/frontend"
)

// TestChunkingCounts uploads a blob, then a changed version, and
// downloads the second twice through a chunk cache, all with chunked
// transfers against a real frontend on loopback, and checks the counters
// as scraped.
func TestChunkingCounts(t *testing.T) {
	g := grpc.NewServer(frontend.ServerCodec())
	frontend.New(blobstore.NewMemory(0), actioncache.NewMemory(0), frontend.Options{}).Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := client.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	caps, err := client.GetCapabilities(ctx, conn, "")
	if err != nil {
		t.Fatal(err)
	}
	cache, err := client.OpenChunkCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c := client.NewChunked(client.NewCAS(conn, "", digest.SHA256, client.BatchLimit(caps)), client.ChunkingOf(caps), cache, NewChunking(reg))

	const size = 8 << 20
	v1 := make([]byte, size)
	rand.New(rand.NewSource(1)).Read(v1)
	v2 := bytes.Clone(v1)
	copy(v2[size/2:], bytes.Repeat([]byte{7}, 1000))
	var d2 digest.Digest
	for _, data := range [][]byte{v1, v2} {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		d2 = digest.Compute(digest.SHA256, data)
		if _, err := c.UploadFile(ctx, d2, p); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		var buf bytes.Buffer
		if _, err := c.ReadTo(ctx, d2, &buf); err != nil || !bytes.Equal(buf.Bytes(), v2) {
			t.Fatalf("download: %v", err)
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[name] = m.GetCounter().GetValue()
		}
	}
	if got["gantry_chunked_transfers_total{direction=upload}"] != 2 || got["gantry_chunked_transfers_total{direction=download}"] != 2 {
		t.Errorf("transfers: %v; want 2 uploads and 2 downloads", got)
	}
	upSent, upSaved := got["gantry_chunked_transferred_bytes_total{direction=upload}"], got["gantry_chunked_saved_bytes_total{direction=upload}"]
	if upSent+upSaved != 2*size || upSent > size+4<<20 || upSaved < size-4<<20 {
		t.Errorf("upload bytes sent %v, saved %v; want the first blob and the changed chunks sent, the rest saved", upSent, upSaved)
	}
	downSent, downSaved := got["gantry_chunked_transferred_bytes_total{direction=download}"], got["gantry_chunked_saved_bytes_total{direction=download}"]
	if downSent != size || downSaved != size {
		t.Errorf("download bytes fetched %v, saved %v; want the first download fetched, the second from the cache", downSent, downSaved)
	}
	if v, ok := got["gantry_chunk_cache_corrupt_total"]; !ok || v != 0 {
		t.Errorf("corrupt chunks %v (present %v); want 0", v, ok)
	}
}
