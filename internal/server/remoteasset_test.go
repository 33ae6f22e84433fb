package server

import (
	"archive/tar"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
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

// tarOf is a tar archive of files (name: content).
func tarOf(t *testing.T, files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	return buf.Bytes()
}

// TestFetchDirectoryKeepsInputTreeLimits: FetchDirectory refuses an
// archive deeper, or with a longer name, than Execute accepts in an input
// tree, naming the entry and the limit; a tree at the limits unpacks, and
// an action runs on it.
func TestFetchDirectoryKeepsInputTreeLimits(t *testing.T) {
	deep := strings.Repeat("d/", inputtree.MaxDepth) + "f"
	long := strings.Repeat("n", inputtree.MaxNameLength)
	archives := map[string][]byte{
		"/deep.tar": tarOf(t, map[string]string{strings.Repeat("d/", 700) + "f": "x"}),
		"/long.tar": tarOf(t, map[string]string{"src/" + strings.Repeat("n", 5000) + ".c": "x"}),
		"/ok.tar":   tarOf(t, map[string]string{deep: "deep\n", long: "long\n"}),
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(archives[r.URL.Path]) }))
	defer origin.Close()
	f := startFarm(t, func(c *config.Config) { c.RemoteAsset.AllowHosts = []string{"127.0.0.1"} })
	ctx := ctxT(t)
	fetch := func(path string) (*rapb.FetchDirectoryResponse, error) {
		return rapb.NewFetchClient(f.conn).FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{origin.URL + path}})
	}
	for path, want := range map[string][]string{
		"/deep.tar": {`entry "d/d/d/`, "nests directories 700 deep, more than the 512 levels", "(1401 bytes)"},
		"/long.tar": {`entry "src/nnn`, "a name of 5002 bytes", "more than the 255 bytes"},
	} {
		_, err := fetch(path)
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.FailedPrecondition || len(msg) > 600 {
			t.Errorf("%s: %.700v; want a short FAILED_PRECONDITION", path, err)
		}
		for _, w := range append(want, origin.URL+path) {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", path, msg, w)
			}
		}
	}
	resp, err := fetch("/ok.tar")
	if err != nil {
		t.Fatalf("a tree at the limits: %v", err)
	}
	root, err := digest.FromProto(digest.SHA256, resp.RootDirectoryDigest)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.CheckResponse(f.run(ctx, root, shCmd("cat "+deep+" "+long))); err != nil {
		t.Fatalf("an action on the fetched tree: %v", err)
	}
}
