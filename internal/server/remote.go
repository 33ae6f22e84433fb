package server

import (
	"context"
	"io"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
)

// remoteCAS is the CAS of another node (the frontend holding it) as a
// blobstore.Store: one client.CAS per digest function. Gantry's CAS is
// shared by all instance names, so the empty instance reaches it all.
type remoteCAS struct {
	conn     *grpc.ClientConn
	maxBatch int64

	mu sync.Mutex
	by map[digest.Function]*client.CAS
}

var _ blobstore.Store = (*remoteCAS)(nil)

func newRemoteCAS(conn *grpc.ClientConn, maxBatch int64) *remoteCAS {
	return &remoteCAS{conn: conn, maxBatch: maxBatch, by: map[digest.Function]*client.CAS{}}
}

func (r *remoteCAS) client(fn digest.Function) *client.CAS {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.by[fn]
	if c == nil {
		c = client.NewCAS(r.conn, "", fn, r.maxBatch)
		r.by[fn] = c
	}
	return c
}

// FindMissing implements blobstore.Store; digests of several functions
// go to one call per function, the answer keeping ds's order.
func (r *remoteCAS) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	byFn := map[digest.Function][]digest.Digest{}
	for _, d := range ds {
		byFn[d.Function] = append(byFn[d.Function], d)
	}
	missing := map[digest.Digest]bool{}
	for fn, fds := range byFn {
		m, err := r.client(fn).FindMissing(ctx, fds)
		if err != nil {
			return nil, err
		}
		if len(byFn) == 1 {
			return m, nil
		}
		for _, d := range m {
			missing[d] = true
		}
	}
	var out []digest.Digest
	for _, d := range ds {
		if missing[d] {
			out = append(out, d)
		}
	}
	return out, nil
}

// Open implements blobstore.Store.
func (r *remoteCAS) Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	return r.client(d.Function).Open(ctx, d, offset)
}

// Create implements blobstore.Store.
func (r *remoteCAS) Create(ctx context.Context, d digest.Digest) (blobstore.Writer, error) {
	return r.client(d.Function).Create(ctx, d)
}

// remoteAC reaches the action cache of the node holding it.
type remoteAC struct{ ac repb.ActionCacheClient }

// lookup is an execution.ResultLookup: the remote GetActionResult
// checks completeness as the local lookup does, and answers NOT_FOUND
// for a missing or incomplete result.
func (r remoteAC) lookup(ctx context.Context, instance string, ad digest.Digest) (*repb.ActionResult, error) {
	return r.ac.GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: instance, ActionDigest: ad.Proto(), DigestFunction: ad.Function})
}

// store writes a worker's result (the worker service's UpdateActionCache).
func (r remoteAC) store(ctx context.Context, instance string, ad digest.Digest, ar *repb.ActionResult) error {
	_, err := r.ac.UpdateActionResult(ctx, &repb.UpdateActionResultRequest{InstanceName: instance, ActionDigest: ad.Proto(), ActionResult: ar, DigestFunction: ad.Function})
	return err
}
