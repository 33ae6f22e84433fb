package asset

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

func TestFetchBlobStoresAndVerifies(t *testing.T) {
	body := []byte("the dependency's bytes")
	o := newOrigin(t, serve(body))
	fx := newFixture(t, nil)
	resp, err := fx.fetchBlob([]string{o.URL + "/dep.tar.gz"}, q("checksum.sri", sri(body)), q("bazel.canonical_id", "dep-1"))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := digest.FromProto(digest.SHA256, resp.BlobDigest)
	if got := mustGet(t, fx.cas, d); !bytes.Equal(got, body) {
		t.Fatalf("CAS holds %q", got)
	}
	if resp.Uri != o.URL+"/dep.tar.gz" || resp.DigestFunction != digest.SHA256 {
		t.Fatalf("response %v", resp)
	}
}

func TestFetchBlobChecksumMismatch(t *testing.T) {
	body := []byte("what the origin serves")
	o := newOrigin(t, serve(body))
	fx := newFixture(t, nil)
	wrong := sri([]byte("what the WORKSPACE expects"))
	_, err := fx.fetchBlob([]string{o.URL + "/f"}, q("checksum.sri", wrong))
	msg := wantCode(t, err, codes.FailedPrecondition)
	for _, want := range []string{wrong, sri(body), o.URL + "/f", "checksum mismatch"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not contain %q", msg, want)
		}
	}
	// Nothing was indexed: the right checksum is fetched, not refused.
	if _, err := fx.fetchBlob([]string{o.URL + "/f"}, q("checksum.sri", sri(body))); err != nil {
		t.Fatal(err)
	}
}

func TestFetchBlob404ThenGoodMirror(t *testing.T) {
	body := []byte("mirrored")
	missing := newOrigin(t, http.NotFound)
	good := newOrigin(t, serve(body))
	fx := newFixture(t, nil)
	resp, err := fx.fetchBlob([]string{missing.URL + "/x", good.URL + "/x"}, q("checksum.sri", sri(body)))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Uri != good.URL+"/x" || missing.hits.Load() != 1 {
		t.Fatalf("uri %s, hits on the 404 origin %d", resp.Uri, missing.hits.Load())
	}
	// All 404: NOT_FOUND naming the URI.
	_, err = fx.fetchBlob([]string{missing.URL + "/y"})
	if msg := wantCode(t, err, codes.NotFound); !strings.Contains(msg, missing.URL+"/y") || !strings.Contains(msg, "404") {
		t.Fatalf("message %q", msg)
	}
}

func TestFetchBlobRedirects(t *testing.T) {
	var o *origin
	o = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/a":
			http.Redirect(w, r, "/b", http.StatusFound)
		case "/b":
			http.Redirect(w, r, "/a", http.StatusFound)
		case "/hop":
			http.Redirect(w, r, "/final", http.StatusMovedPermanently)
		case "/final":
			w.Write([]byte("arrived"))
		default:
			http.Redirect(w, r, r.URL.Path+"x", http.StatusFound) // never the same URL twice
		}
	})
	fx := newFixture(t, nil)
	if _, err := fx.fetchBlob([]string{o.URL + "/hop"}); err != nil {
		t.Fatalf("one redirect: %v", err)
	}
	_, err := fx.fetchBlob([]string{o.URL + "/a"})
	if msg := wantCode(t, err, codes.Unavailable); !strings.Contains(msg, "redirect loop") {
		t.Fatalf("message %q", msg)
	}
	_, err = fx.fetchBlob([]string{o.URL + "/endless"})
	if msg := wantCode(t, err, codes.Unavailable); !strings.Contains(msg, "stopped after 5 redirects") {
		t.Fatalf("message %q", msg)
	}
}

func TestFetchBlobSlowOrigin(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/trickle" {
			w.Write([]byte("a start"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	fx := newFixture(t, func(c *FetcherConfig) {
		c.HeaderTimeout = 200 * time.Millisecond
		c.IdleTimeout = 200 * time.Millisecond
	})
	_, err := fx.fetchBlob([]string{o.URL + "/silent"})
	wantCode(t, err, codes.DeadlineExceeded)
	_, err = fx.fetchBlob([]string{o.URL + "/trickle"})
	if msg := wantCode(t, err, codes.DeadlineExceeded); !strings.Contains(msg, "idle_timeout") {
		t.Fatalf("message %q", msg)
	}
	// The request's own timeout too.
	fx = newFixture(t, nil)
	_, err = fx.svc.FetchBlob(context.Background(), &rapb.FetchBlobRequest{Uris: []string{o.URL + "/silent"}, Timeout: durationpb.New(200 * time.Millisecond)})
	wantCode(t, err, codes.DeadlineExceeded)
}

func TestFetchBlobTooLarge(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 1<<20+1)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			w.Write(big[:1000])
			w.(http.Flusher).Flush() // no Content-Length
			w.Write(big[1000:])
			return
		}
		w.Write(big)
	})
	fx := newFixture(t, nil)
	for _, p := range []string{"/sized", "/chunked"} {
		_, err := fx.fetchBlob([]string{o.URL + p})
		if msg := wantCode(t, err, codes.ResourceExhausted); !strings.Contains(msg, "remote_asset.max_size") {
			t.Fatalf("%s: message %q", p, msg)
		}
	}
}

func TestFetchBlobHeadersReachOriginNotIndex(t *testing.T) {
	type seen struct{ auth, token, bazel string }
	got := make(chan seen, 10)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("Authorization"), r.Header.Get("X-Token"), r.Header.Get("X-Bazel")}
		if r.URL.Path == "/first" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("private"))
	})
	fx := newFixture(t, nil)
	second := o.URL + "/second"
	authJSON := `{"` + second + `": {"X-Bazel": "bazel-secret"}}`
	_, err := fx.fetchBlob([]string{o.URL + "/first", second},
		q("http_header:Authorization", "Bearer s3cret-token"),
		q("http_header_url:1:X-Token", "url-secret"),
		q("bazel.auth_headers", authJSON))
	if err != nil {
		t.Fatal(err)
	}
	first, sec := <-got, <-got
	if first != (seen{"Bearer s3cret-token", "", ""}) || sec != (seen{"Bearer s3cret-token", "url-secret", "bazel-secret"}) {
		t.Fatalf("origin saw %+v then %+v", first, sec)
	}
	// The index holds no header value, and other credentials still hit.
	ar, err := fx.ac.Get(context.Background(), indexInstance(""), key(Blob, digest.SHA256, second, nil))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := proto.Marshal(ar)
	for _, secret := range []string{"s3cret-token", "url-secret", "bazel-secret"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Fatalf("the index entry holds %q", secret)
		}
	}
	if _, err := fx.fetchBlob([]string{second}, q("http_header:Authorization", "Bearer other")); err != nil {
		t.Fatal(err)
	}
	if n := o.hits.Load(); n != 2 {
		t.Fatalf("origin hit %d times, want 2 (the last fetch is cached)", n)
	}
}

func TestFetchBlobRefusesPrivateAddressesByDefault(t *testing.T) {
	o := newOrigin(t, serve([]byte("internal secret")))
	fx := newFixture(t, func(c *FetcherConfig) { c.Guard = nil }) // the default: no allow list
	_, err := fx.fetchBlob([]string{o.URL + "/admin"})
	if msg := wantCode(t, err, codes.PermissionDenied); !strings.Contains(msg, "remote_asset.allow_hosts") {
		t.Fatalf("message %q", msg)
	}
	// A name that resolves to loopback is refused the same way: the
	// check is on the address dialled, after DNS.
	_, port, _ := strings.Cut(strings.TrimPrefix(o.URL, "http://"), ":")
	_, err = fx.fetchBlob([]string{"http://localhost:" + port + "/admin"})
	wantCode(t, err, codes.PermissionDenied)
	if o.hits.Load() != 0 {
		t.Fatal("the origin was contacted")
	}
	// A redirect from an allowed host to a forbidden address is refused
	// too: the guard checks every dial.
	allowed := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, o.URL+"/admin", http.StatusFound)
	})
	g, _ := NewGuard([]string{"localhost"})
	fx = newFixture(t, func(c *FetcherConfig) { c.Guard = g })
	_, port, _ = strings.Cut(strings.TrimPrefix(allowed.URL, "http://"), ":")
	_, err = fx.fetchBlob([]string{"http://localhost:" + port + "/go"})
	wantCode(t, err, codes.PermissionDenied)
	if allowed.hits.Load() != 1 || o.hits.Load() != 0 {
		t.Fatalf("hits: allowed %d, forbidden %d", allowed.hits.Load(), o.hits.Load())
	}
}

func TestFetchBlobCachedAfterOriginStops(t *testing.T) {
	body := []byte("once")
	o := newOrigin(t, serve(body))
	fx := newFixture(t, nil)
	uri := o.URL + "/dep"
	first, err := fx.fetchBlob([]string{uri}, q("checksum.sri", sri(body)))
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	again, err := fx.fetchBlob([]string{uri}, q("checksum.sri", sri(body)))
	if err != nil {
		t.Fatalf("with the origin stopped: %v", err)
	}
	if !proto.Equal(first.BlobDigest, again.BlobDigest) || o.hits.Load() != 1 {
		t.Fatalf("digests %v %v, hits %d", first.BlobDigest, again.BlobDigest, o.hits.Load())
	}
	// Other qualifiers are another asset: asked from the origin.
	_, err = fx.fetchBlob([]string{uri}, q("bazel.canonical_id", "other"))
	wantCode(t, err, codes.Unavailable)
}

func TestOldestContentAcceptedForcesRefetch(t *testing.T) {
	o := newOrigin(t, serve([]byte("v")))
	fx := newFixture(t, nil)
	uri := o.URL + "/dep"
	if _, err := fx.fetchBlob([]string{uri}); err != nil {
		t.Fatal(err)
	}
	fetched := fx.clock.Now()
	fx.clock.Add(time.Hour)
	req := &rapb.FetchBlobRequest{Uris: []string{uri}, OldestContentAccepted: timestamppb.New(fetched)}
	if _, err := fx.svc.FetchBlob(context.Background(), req); err != nil || o.hits.Load() != 1 {
		t.Fatalf("as old as accepted: err %v, hits %d (want a cached answer)", err, o.hits.Load())
	}
	req.OldestContentAccepted = timestamppb.New(fetched.Add(time.Second))
	if _, err := fx.svc.FetchBlob(context.Background(), req); err != nil || o.hits.Load() != 2 {
		t.Fatalf("newer required: err %v, hits %d (want a refetch)", err, o.hits.Load())
	}
}

func TestEvictedBlobIsRefetched(t *testing.T) {
	o := newOrigin(t, serve([]byte("evict me")))
	fx := newFixture(t, nil)
	resp, err := fx.fetchBlob([]string{o.URL + "/e"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := digest.FromProto(digest.SHA256, resp.BlobDigest)
	fx.cas.evict(d)
	if _, err := fx.fetchBlob([]string{o.URL + "/e"}); err != nil {
		t.Fatal(err)
	}
	if o.hits.Load() != 2 {
		t.Fatalf("hits %d, want 2", o.hits.Load())
	}
	if got := mustGet(t, fx.cas, d); string(got) != "evict me" {
		t.Fatalf("CAS holds %q", got)
	}
}

func TestPushThenFetch(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	data := []byte("seeded by CI")
	d := digest.Compute(digest.SHA256, data)
	uri := "http://127.0.0.1:1/never-contacted"
	push := &rapb.PushBlobRequest{Uris: []string{uri}, BlobDigest: d.Proto(), Qualifiers: []*rapb.Qualifier{q("checksum.sri", sri(data))}}
	_, err := fx.svc.PushBlob(ctx, push)
	wantCode(t, err, codes.FailedPrecondition) // not in the CAS yet
	if err := blobstore.Put(ctx, fx.cas, d, data); err != nil {
		t.Fatal(err)
	}
	push.ExpireAt = timestamppb.New(fx.clock.Now().Add(time.Hour))
	if _, err := fx.svc.PushBlob(ctx, push); err != nil {
		t.Fatal(err)
	}
	resp, err := fx.fetchBlob([]string{uri}, push.Qualifiers...)
	if err != nil {
		t.Fatal(err)
	}
	if resp.BlobDigest.Hash != d.Hash || !resp.ExpiresAt.AsTime().Equal(push.ExpireAt.AsTime()) {
		t.Fatalf("response %v", resp)
	}
	// expire_at is honoured: after it, the origin is asked (and fails).
	fx.clock.Add(time.Hour)
	_, err = fx.fetchBlob([]string{uri}, push.Qualifiers...)
	wantCode(t, err, codes.Unavailable)
}

func TestPushDirectoryThenFetch(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	root, err := Unpack(ctx, bytes.NewReader(nil), 0, Tar, Limits{MaxExpandedSize: 1}, fx.cas, digest.SHA256, "")
	if err != nil {
		t.Fatal(err)
	}
	uri := "http://127.0.0.1:1/empty.tar"
	if _, err := fx.svc.PushDirectory(ctx, &rapb.PushDirectoryRequest{Uris: []string{uri}, RootDirectoryDigest: root.Proto()}); err != nil {
		t.Fatal(err)
	}
	resp, err := fx.svc.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{uri}})
	if err != nil || resp.RootDirectoryDigest.Hash != root.Hash {
		t.Fatalf("resp %v, err %v", resp, err)
	}
}

// TestPushedURNExpires: a blob pushed under a urn: is served until its
// expire_at, and NOT_FOUND after it (no origin to ask, unlike an http
// URI, which is downloaded again).
func TestPushedURNExpires(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	data := []byte("an artifact")
	d := digest.Compute(digest.SHA256, data)
	if err := blobstore.Put(ctx, fx.cas, d, data); err != nil {
		t.Fatal(err)
	}
	uri := "urn:fdc:buildstream.build:2020:v1:project/element/key"
	push := &rapb.PushBlobRequest{Uris: []string{uri}, BlobDigest: d.Proto(), ExpireAt: timestamppb.New(fx.clock.Now().Add(time.Hour))}
	if _, err := fx.svc.PushBlob(ctx, push); err != nil {
		t.Fatal(err)
	}
	if resp, err := fx.fetchBlob([]string{uri}); err != nil || resp.BlobDigest.Hash != d.Hash {
		t.Fatalf("before expire_at: %v, %v", resp, err)
	}
	fx.clock.Add(time.Hour)
	msg := wantCode(t, firstErr(fx.fetchBlob([]string{uri})), codes.NotFound)
	if !strings.Contains(msg, "never pushed") || !strings.Contains(msg, "expired") {
		t.Fatalf("message %q", msg)
	}
}

func firstErr(_ any, err error) error { return err }

func TestUnsupportedQualifier(t *testing.T) {
	fx := newFixture(t, nil)
	_, err := fx.fetchBlob([]string{"https://example.com/x"}, q("vcs.commit", "abc"))
	msg := wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(msg, "vcs.commit") {
		t.Fatalf("message %q", msg)
	}
	var br *errdetails.BadRequest
	for _, d := range status.Convert(err).Details() {
		if b, ok := d.(*errdetails.BadRequest); ok {
			br = b
		}
	}
	if br == nil || len(br.FieldViolations) != 1 || br.FieldViolations[0].Field != "qualifiers.name" || br.FieldViolations[0].Description != `"vcs.commit" not supported` {
		t.Fatalf("details %v", br)
	}
}

func TestFetchOverTLSWithConfiguredCA(t *testing.T) {
	srv := httptest.NewTLSServer(serve([]byte("over tls")))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	cert := srv.TLS.Certificates[0].Certificate[0]
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert}), 0o600); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, nil)
	_, err := fx.fetchBlob([]string{srv.URL + "/x"})
	if msg := wantCode(t, err, codes.Unavailable); !strings.Contains(msg, "certificate") {
		t.Fatalf("without the CA: %q", msg)
	}
	fx = newFixture(t, func(c *FetcherConfig) { c.TLSCAFile = ca })
	if _, err := fx.fetchBlob([]string{srv.URL + "/x"}); err != nil {
		t.Fatalf("with remote_asset.tls_ca_file: %v", err)
	}
}

// TestConcurrentFetchesShareOneDownload: callers asking for the same
// asset while it downloads wait for that download instead of starting
// their own.
func TestConcurrentFetchesShareOneDownload(t *testing.T) {
	release := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Write([]byte("popular"))
	})
	fx := newFixture(t, nil)
	const n = 5
	results := make(chan *rapb.FetchBlobResponse, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			resp, err := fx.fetchBlob([]string{o.URL + "/dep"})
			results <- resp
			errs <- err
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for fx.svc.attached.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d callers attached", fx.svc.attached.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if r := <-results; r.BlobDigest.Hash != digest.Compute(digest.SHA256, []byte("popular")).Hash {
			t.Fatalf("digest %v", r.BlobDigest)
		}
	}
	if o.hits.Load() != 1 {
		t.Fatalf("origin hit %d times, want 1", o.hits.Load())
	}
}

// TestFetchThroughProxy: behind a proxy the dial goes to the proxy (trusted,
// though on loopback), and the guard checks the target's own address.
func TestFetchThroughProxy(t *testing.T) {
	proxy := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		// A forward proxy gets the absolute URL; answer for it.
		w.Write([]byte("via proxy for " + r.URL.Host))
	})
	proxyURL, _ := url.Parse(proxy.URL)
	fx := newFixture(t, func(c *FetcherConfig) {
		c.Guard = nil // the default: nothing private allowed
		c.Proxy = func(*http.Request) (*url.URL, error) { return proxyURL, nil }
	})
	resp, err := fx.fetchBlob([]string{"http://93.184.216.34/dep"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := digest.FromProto(digest.SHA256, resp.BlobDigest)
	if got := string(mustGet(t, fx.cas, d)); got != "via proxy for 93.184.216.34" {
		t.Fatalf("got %q", got)
	}
	_, err = fx.fetchBlob([]string{"http://10.0.0.1/internal"})
	wantCode(t, err, codes.PermissionDenied)
	if proxy.hits.Load() != 1 {
		t.Fatalf("proxy hit %d times, want 1 (the private target refused before it)", proxy.hits.Load())
	}
}

// TestPasswordInURINotStoredNorShown: a password in the URI's userinfo is
// sent (basic auth) but appears in no message and no index entry.
func TestPasswordInURINotStoredNorShown(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if _, pass, _ := r.BasicAuth(); pass != "hunter2" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("private"))
	})
	fx := newFixture(t, nil)
	uri := strings.Replace(o.URL, "http://", "http://user:hunter2@", 1) + "/dep"
	if _, err := fx.fetchBlob([]string{uri}); err != nil {
		t.Fatal(err)
	}
	ar, err := fx.ac.Get(context.Background(), indexInstance(""), key(Blob, digest.SHA256, uri, nil))
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := proto.Marshal(ar); bytes.Contains(raw, []byte("hunter2")) {
		t.Fatal("the index entry holds the password")
	}
	_, err = fx.fetchBlob([]string{uri}, q("checksum.sri", sri([]byte("other"))))
	if msg := wantCode(t, err, codes.FailedPrecondition); strings.Contains(msg, "hunter2") || !strings.Contains(msg, "checksum mismatch") {
		t.Fatalf("message %q", msg)
	}
}
