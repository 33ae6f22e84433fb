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
	"time"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

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

// TestRemoteAssetPushThenFetchAnyURI: content pushed under a URI Gantry
// cannot download (BuildStream's urn:fdc:buildstream.build:... artifact
// names, file:, a bare name) comes back from FetchBlob and FetchDirectory
// on a running server, with the qualifiers it was pushed with; the
// archive format of a pushed directory's URI does not matter.
func TestRemoteAssetPushThenFetchAnyURI(t *testing.T) {
	f := startFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	ctx := ctxT(t)
	fetch, push := rapb.NewFetchClient(f.conn), rapb.NewPushClient(f.conn)

	blob := f.putBytes([]byte("a pushed blob"))
	file := f.putBytes([]byte("hello\n"))
	root := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: "hello.txt", Digest: file.Proto()}}})
	for _, uri := range []string{"urn:fdc:buildstream.build:2020:v1:project/hello/0123abcd", "file:///srv/artifacts/hello", "just-a-name"} {
		if _, err := push.PushBlob(ctx, &rapb.PushBlobRequest{Uris: []string{uri}, BlobDigest: blob.Proto()}); err != nil {
			t.Fatalf("PushBlob %s: %v", uri, err)
		}
		bresp, err := fetch.FetchBlob(ctx, &rapb.FetchBlobRequest{Uris: []string{uri}})
		if err != nil {
			t.Fatalf("FetchBlob %s after PushBlob: %v", uri, err)
		}
		if bresp.Uri != uri || f.read(bresp.BlobDigest) != "a pushed blob" {
			t.Fatalf("FetchBlob %s: %v", uri, bresp)
		}
		if _, err := push.PushDirectory(ctx, &rapb.PushDirectoryRequest{Uris: []string{uri}, RootDirectoryDigest: root.Proto()}); err != nil {
			t.Fatalf("PushDirectory %s: %v", uri, err)
		}
		dresp, err := fetch.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{uri}})
		if err != nil {
			t.Fatalf("FetchDirectory %s after PushDirectory: %v", uri, err)
		}
		if dresp.Uri != uri || dresp.RootDirectoryDigest.Hash != root.Hash {
			t.Fatalf("FetchDirectory %s: %v, want root %s", uri, dresp, root)
		}
	}

	// Qualifiers identify what was pushed: the same ones fetch it, others
	// (or none) do not; content pushed before oldest_content_accepted is
	// not served.
	uri := "urn:fdc:buildstream.build:2020:v1:project/hello/qualified"
	qs := []*rapb.Qualifier{{Name: "resource_type", Value: "application/x-buildstream-artifact"}}
	if _, err := push.PushDirectory(ctx, &rapb.PushDirectoryRequest{Uris: []string{uri}, Qualifiers: qs, RootDirectoryDigest: root.Proto()}); err != nil {
		t.Fatal(err)
	}
	if resp, err := fetch.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{uri}, Qualifiers: qs}); err != nil || resp.RootDirectoryDigest.Hash != root.Hash {
		t.Fatalf("with the pushed qualifiers: %v, %v", resp, err)
	}
	if _, err := fetch.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{uri}}); status.Code(err) != codes.NotFound {
		t.Fatalf("without the pushed qualifiers: %v; want NOT_FOUND", err)
	}
	later := timestamppb.New(time.Now().Add(time.Minute))
	if _, err := fetch.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{uri}, Qualifiers: qs, OldestContentAccepted: later}); status.Code(err) != codes.NotFound {
		t.Fatalf("oldest_content_accepted after the push: %v; want NOT_FOUND", err)
	}
}

// TestRemoteAssetUnknownURINotFound: FetchBlob and FetchDirectory of a
// URI Gantry cannot download that nobody pushed is NOT_FOUND (the miss
// BuildStream's artifact cache expects), saying so; it is a miss, not a
// failed download for the status pages. With an http URI next to it,
// the http one is downloaded.
func TestRemoteAssetUnknownURINotFound(t *testing.T) {
	archive := tarOf(t, map[string]string{"src/main.c": "int main(void) { return 0; }\n"})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/src.tar":
			w.Write(archive)
		case "/dep.txt":
			w.Write([]byte("downloaded"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer origin.Close()
	f := startFarm(t, func(c *config.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.Worker.Enabled = false
		c.RemoteAsset.AllowHosts = []string{"127.0.0.1"}
	})
	ctx := ctxT(t)
	fetch := rapb.NewFetchClient(f.conn)
	for _, uri := range []string{"urn:fdc:buildstream.build:2020:v1:project/hello/never", "urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6", "file:///etc/passwd", "ftp://example.com/x.tar", "no-scheme.tar"} {
		_, err := fetch.FetchBlob(ctx, &rapb.FetchBlobRequest{Uris: []string{uri}})
		checkNotPushed(t, err, uri, "PushBlob")
		_, err = fetch.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{uri}})
		checkNotPushed(t, err, uri, "PushDirectory")
	}
	if _, body := httpGet(t, "http://"+f.srv.HTTPAddr()+"/status/failures"); !strings.Contains(body, "no failed downloads") {
		t.Errorf("misses on pushed-only URIs are listed as failed downloads:\n%s", body)
	}

	// An http URI after an unknown urn: is downloaded (blob, and an
	// archive unpacked); an http URI that is missing at its origin is
	// NOT_FOUND too, with both reasons.
	urn := "urn:fdc:buildstream.build:2020:v1:project/hello/other"
	bresp, err := fetch.FetchBlob(ctx, &rapb.FetchBlobRequest{Uris: []string{urn, origin.URL + "/dep.txt"}})
	if err != nil || bresp.Uri != origin.URL+"/dep.txt" || f.read(bresp.BlobDigest) != "downloaded" {
		t.Fatalf("FetchBlob urn:, http: %v, %v", bresp, err)
	}
	dresp, err := fetch.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{urn, origin.URL + "/src.tar"}})
	if err != nil || dresp.Uri != origin.URL+"/src.tar" {
		t.Fatalf("FetchDirectory urn:, http: %v, %v", dresp, err)
	}
	root := &repb.Directory{}
	if err := proto.Unmarshal([]byte(f.read(dresp.RootDirectoryDigest)), root); err != nil || len(root.Directories) != 1 || root.Directories[0].Name != "src" {
		t.Fatalf("unpacked root %v, %v", root, err)
	}
	_, err = fetch.FetchBlob(ctx, &rapb.FetchBlobRequest{Uris: []string{origin.URL + "/gone.txt", urn}})
	if msg := status.Convert(err).Message(); status.Code(err) != codes.NotFound || !strings.Contains(msg, "404") || !strings.Contains(msg, "never pushed") {
		t.Fatalf("http 404 then an unknown urn: %v", err)
	}
	// An http URI still needs a format Gantry can tell to be unpacked.
	_, err = fetch.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{origin.URL + "/dep.txt"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "resource_type") {
		t.Fatalf("FetchDirectory of an http URI without an archive name: %v", err)
	}
}

func checkNotPushed(t *testing.T, err error, uri, push string) {
	t.Helper()
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.NotFound {
		t.Fatalf("%s (%s): %v; want NOT_FOUND", uri, push, err)
	}
	for _, want := range []string{uri, "never pushed", "only http and https", push} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: %q does not say %q", uri, msg, want)
		}
	}
}
