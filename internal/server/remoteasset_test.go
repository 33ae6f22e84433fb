package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"

	"github.com/gantry-build/gantry/internal/config"
)

// TestRemoteAssetFetchThroughServer: FetchBlob on a running server puts
// the download in its CAS (read back through ByteStream), and the index
// survives a restart on the same data_dir with the origin stopped.
func TestRemoteAssetFetchThroughServer(t *testing.T) {
	var hits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Write([]byte("a dependency"))
	}))
	defer origin.Close()
	dataDir := t.TempDir()
	mod := func(c *config.Config) {
		c.DataDir = dataDir
		c.Worker.Enabled = false
		c.RemoteAsset.AllowHosts = []string{"127.0.0.1"}
	}
	req := &rapb.FetchBlobRequest{Uris: []string{origin.URL + "/dep.txt"}}
	f := startFarm(t, mod)
	resp, err := rapb.NewFetchClient(f.conn).FetchBlob(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.read(resp.BlobDigest); got != "a dependency" {
		t.Fatalf("CAS holds %q", got)
	}
	f.stop()
	origin.Close()

	f = startFarm(t, mod)
	again, err := rapb.NewFetchClient(f.conn).FetchBlob(context.Background(), req)
	if err != nil {
		t.Fatalf("after a restart, origin stopped: %v", err)
	}
	if again.BlobDigest.Hash != resp.BlobDigest.Hash || hits.Load() != 1 {
		t.Fatalf("digest %v, origin hits %d", again.BlobDigest, hits.Load())
	}
}
