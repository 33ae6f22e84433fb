package asset

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// evictable is a CAS from which a test can evict blobs.
type evictable struct {
	blobstore.Store
	mu      sync.Mutex
	evicted map[digest.Digest]bool
}

func (e *evictable) evict(d digest.Digest) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evicted[d] = true
}

func (e *evictable) gone(d digest.Digest) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evicted[d]
}

func (e *evictable) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	missing, err := e.Store.FindMissing(ctx, ds)
	for _, d := range ds {
		if e.gone(d) {
			missing = append(missing, d)
		}
	}
	return missing, err
}

func (e *evictable) Open(ctx context.Context, d digest.Digest, off int64) (io.ReadCloser, error) {
	if e.gone(d) {
		return nil, blobstore.ErrNotFound
	}
	return e.Store.Open(ctx, d, off)
}

func (e *evictable) Create(ctx context.Context, d digest.Digest) (blobstore.Writer, error) {
	e.mu.Lock()
	delete(e.evicted, d) // written again
	e.mu.Unlock()
	return e.Store.Create(ctx, d)
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fixture is a service over in-memory stores, with a fetcher that may
// fetch from 127.0.0.1 (where the test servers are).
type fixture struct {
	svc   *Service
	cas   *evictable
	ac    *actioncache.Memory
	clock *clock
}

func testFetcherConfig() FetcherConfig {
	g, err := NewGuard([]string{"127.0.0.1"})
	if err != nil {
		panic(err)
	}
	return FetcherConfig{ConnectTimeout: 5 * time.Second, HeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxRedirects: 5, MaxSize: 1 << 20, PerHostConcurrency: 4, Guard: g}
}

func newFixture(t testing.TB, mod func(*FetcherConfig)) *fixture {
	t.Helper()
	cfg := testFetcherConfig()
	if mod != nil {
		mod(&cfg)
	}
	f, err := NewFetcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixture{cas: &evictable{Store: blobstore.NewMemory(0), evicted: map[digest.Digest]bool{}}, ac: actioncache.NewMemory(0), clock: &clock{t: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}}
	fx.svc = New(fx.cas, fx.ac, f, Options{Archive: Limits{MaxExpandedSize: 1 << 20, MaxEntries: 1000}, DefaultTimeout: 30 * time.Second, Now: fx.clock.Now, TempDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return fx
}

// origin is a test HTTP server that counts its requests.
type origin struct {
	*httptest.Server
	hits atomic.Int64
}

func newOrigin(t testing.TB, h http.HandlerFunc) *origin {
	o := &origin{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(o.Close)
	return o
}

func serve(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { w.Write(body) }
}

func sri(data []byte) string {
	s := sha256.Sum256(data)
	return "sha256-" + base64.StdEncoding.EncodeToString(s[:])
}

func (fx *fixture) fetchBlob(uris []string, qs ...*rapb.Qualifier) (*rapb.FetchBlobResponse, error) {
	return fx.svc.FetchBlob(context.Background(), &rapb.FetchBlobRequest{Uris: uris, Qualifiers: qs})
}

func q(name, value string) *rapb.Qualifier { return &rapb.Qualifier{Name: name, Value: value} }

func wantCode(t *testing.T, err error, code codes.Code) string {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
	return status.Convert(err).Message()
}

func mustGet(t *testing.T, cas blobstore.Store, d digest.Digest) []byte {
	t.Helper()
	data, err := blobstore.Get(context.Background(), cas, d)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
