package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/digest"
)

// gatedCAS is a CAS server whose n-th BatchUpdateBlobs call waits until
// the test closes release[n]; it records the blobs of every call.
type gatedCAS struct {
	repb.UnimplementedContentAddressableStorageServer
	entered atomic.Int64
	release [2]chan struct{}
	mu      sync.Mutex
	calls   [][]string
}

func (g *gatedCAS) BatchUpdateBlobs(ctx context.Context, req *repb.BatchUpdateBlobsRequest) (*repb.BatchUpdateBlobsResponse, error) {
	n := g.entered.Add(1) - 1
	select {
	case <-g.release[min(n, 1)]:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	resp := &repb.BatchUpdateBlobsResponse{}
	var ds []string
	for _, r := range req.Requests {
		ds = append(ds, string(r.Data))
		resp.Responses = append(resp.Responses, &repb.BatchUpdateBlobsResponse_Response{Digest: r.Digest, Status: status.New(codes.OK, "").Proto()})
	}
	g.mu.Lock()
	g.calls = append(g.calls, ds)
	g.mu.Unlock()
	return resp, nil
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestPutNewJoinsConcurrentUploads: PutNew calls made while a
// BatchUpdateBlobs call is in flight wait and share the next call (a blob
// two of them upload is sent once); one that gives up while waiting
// leaves without its blobs being sent; the leader of a shared call giving
// up does not cancel the others' uploads.
func TestPutNewJoinsConcurrentUploads(t *testing.T) {
	srv := &gatedCAS{release: [2]chan struct{}{make(chan struct{}), make(chan struct{})}}
	conn, _ := startServer(t, func(s *grpc.Server) { repb.RegisterContentAddressableStorageServer(s, srv) })
	cas := NewCAS(conn, "", digest.SHA256, 0)
	blobs := func(contents ...string) map[digest.Digest][]byte {
		m := map[digest.Digest][]byte{}
		for _, c := range contents {
			m[digest.Compute(digest.SHA256, []byte(c))] = []byte(c)
		}
		return m
	}
	waiting := func() int {
		cas.join.mu.Lock()
		defer cas.join.mu.Unlock()
		return len(cas.join.waiting)
	}
	errs := make([]error, 6)
	var wg sync.WaitGroup
	put := func(i int, ctx context.Context, contents ...string) {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = cas.PutNew(ctx, blobs(contents...)) }()
	}

	put(0, context.Background(), "first")
	waitFor(t, "the first call", func() bool { return srv.entered.Load() == 1 })
	leaderCtx, cancelLeader := context.WithCancel(context.Background())
	put(1, leaderCtx, "one", "shared")
	waitFor(t, "one waiting upload", func() bool { return waiting() == 1 })
	quitCtx, quit := context.WithCancel(context.Background())
	put(2, quitCtx, "quits")
	waitFor(t, "two waiting uploads", func() bool { return waiting() == 2 })
	put(3, context.Background(), "three", "shared")
	put(4, context.Background(), "four")
	waitFor(t, "four waiting uploads", func() bool { return waiting() == 4 })
	quit()
	waitFor(t, "the cancelled upload to leave", func() bool { return waiting() == 3 })

	close(srv.release[0]) // the first call ends; the waiting ones go together
	waitFor(t, "the shared call", func() bool { return srv.entered.Load() == 2 })
	cancelLeader()
	// Nothing to poll for: the shared call must just go on. This gives a
	// wrong implementation's cancellation time to reach the server.
	time.Sleep(50 * time.Millisecond)
	close(srv.release[1])
	wg.Wait()

	if errs[0] != nil || errs[1] != nil || errs[3] != nil || errs[4] != nil {
		t.Fatalf("uploads failed: %v, %v, %v, %v", errs[0], errs[1], errs[3], errs[4])
	}
	if !errors.Is(errs[2], context.Canceled) {
		t.Errorf("the upload that gave up while waiting returned %v; want context.Canceled", errs[2])
	}
	if len(srv.calls) != 2 {
		t.Fatalf("%d BatchUpdateBlobs calls (%q); want 2", len(srv.calls), srv.calls)
	}
	got := slices.Sorted(slices.Values(srv.calls[1]))
	if want := []string{"four", "one", "shared", "three"}; !slices.Equal(got, want) {
		t.Errorf("the shared call sent %q; want %q (each blob once, none of the cancelled upload)", got, want)
	}
}
