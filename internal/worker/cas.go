package worker

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
)

// instanceCAS is a blobstore.Store over the server's CAS that uses the
// instance name of the action on whose behalf it is called (carried in the
// context). The file cache holds one Store for every action; this keeps
// each download inside the instance that asked for it.
type instanceCAS struct {
	conn *grpc.ClientConn
	mu   sync.Mutex
	byID map[casKey]*client.CAS
}

type casKey struct {
	instance string
	fn       digest.Function
}

type instanceKey struct{}

// casSource gives the CAS of an instance, for one digest function.
type casSource interface {
	For(instance string, fn digest.Function) blobstore.Store
}

var _ blobstore.Store = (*instanceCAS)(nil)

func newInstanceCAS(conn *grpc.ClientConn) *instanceCAS {
	return &instanceCAS{conn: conn, byID: map[casKey]*client.CAS{}}
}

// withInstance marks ctx as working for an instance.
func withInstance(ctx context.Context, instance string) context.Context {
	return context.WithValue(ctx, instanceKey{}, instance)
}

// For returns the CAS client of one instance and digest function.
func (c *instanceCAS) For(instance string, fn digest.Function) blobstore.Store {
	return c.client(instance, fn)
}

func (c *instanceCAS) client(instance string, fn digest.Function) *client.CAS {
	k := casKey{instance, fn}
	c.mu.Lock()
	defer c.mu.Unlock()
	cas, ok := c.byID[k]
	if !ok {
		cas = client.NewCAS(c.conn, instance, fn, 0)
		c.byID[k] = cas
	}
	return cas
}

func (c *instanceCAS) pick(ctx context.Context, fn digest.Function) *client.CAS {
	inst, _ := ctx.Value(instanceKey{}).(string)
	return c.client(inst, fn)
}

// FindMissing implements blobstore.Store.
func (c *instanceCAS) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	return c.pick(ctx, ds[0].Function).FindMissing(ctx, ds)
}

// Open implements blobstore.Store.
func (c *instanceCAS) Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	return c.pick(ctx, d.Function).Open(ctx, d, offset)
}

// Create implements blobstore.Store.
func (c *instanceCAS) Create(ctx context.Context, d digest.Digest) (blobstore.Writer, error) {
	return c.pick(ctx, d.Function).Create(ctx, d)
}
