package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestRemoteAssetFailuresOnStatusPage: a fetch that fails (the origin
// answers 404) is listed on the status pages' failures page with its URI,
// without the URI's password, and the error.
func TestRemoteAssetFailuresOnStatusPage(t *testing.T) {
	origin := httptest.NewServer(http.NotFoundHandler())
	defer origin.Close()
	f := startFarm(t, func(c *config.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.Worker.Enabled = false
		c.RemoteAsset.AllowHosts = []string{"127.0.0.1"}
	})
	page := "http://" + f.srv.HTTPAddr() + "/status/failures"
	if code, body := httpGet(t, page); code != http.StatusOK || !strings.Contains(body, "no failed downloads") {
		t.Fatalf("before any fetch: %d %s", code, body)
	}
	uri := strings.Replace(origin.URL, "http://", "http://someone:s3cret@", 1) + "/missing.tar.gz"
	_, err := rapb.NewFetchClient(f.conn).FetchBlob(context.Background(), &rapb.FetchBlobRequest{InstanceName: "main", Uris: []string{uri}})
	if err == nil {
		t.Fatal("a fetch of a missing file succeeded")
	}
	_, body := httpGet(t, page)
	table := body[strings.Index(body, `id="download-failures"`):]
	for _, want := range []string{"main", "/missing.tar.gz", "404"} {
		if !strings.Contains(table, want) {
			t.Errorf("the failed downloads table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(body, "s3cret") {
		t.Error("the page shows the URI's password")
	}
}
