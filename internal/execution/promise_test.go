package execution

import (
	"context"
	"slices"
	"sync"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// askedCAS records the digests FindMissing was asked about.
type askedCAS struct {
	blobstore.Store
	mu    sync.Mutex
	asked []digest.Digest
}

func (c *askedCAS) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	c.mu.Lock()
	c.asked = append(c.asked, ds...)
	c.mu.Unlock()
	return c.Store.FindMissing(ctx, ds)
}

func (c *askedCAS) wasAsked(d digest.Digest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.asked, d)
}

// TestExecutePromisesFreshOutputs: the outputs of an action that just
// ran are asked about in the CAS (which promises them
// storage.cas.min_lifetime) before Execute's client hears of them.
func TestExecutePromisesFreshOutputs(t *testing.T) {
	var asked *askedCAS
	e := newEnvCAS(t, nil, nil, func(s blobstore.Store) blobstore.Store { asked = &askedCAS{Store: s}; return asked })
	w := e.worker("w1")
	out := e.putBytes([]byte("output"))
	stdout := e.putBytes([]byte("stdout"))
	ad := e.action(emptyRoot(), simpleCmd("/bin/true"))
	done := make(chan error, 1)
	go func() {
		_, err := e.execute(context.Background(), &repb.ExecuteRequest{ActionDigest: ad.Proto()})
		done <- err
	}()
	a := w.poll()
	if a == nil {
		t.Fatal("no assignment")
	}
	if asked.wasAsked(out) {
		t.Fatal("output asked about before the action finished")
	}
	ar := &repb.ActionResult{StdoutDigest: stdout.Proto(), OutputFiles: []*repb.OutputFile{{Path: "out", Digest: out.Proto()}}}
	if !w.complete(a, ar, codes.OK, "") {
		t.Fatal("completion refused")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, d := range []digest.Digest{out, stdout} {
		if !asked.wasAsked(d) {
			t.Errorf("%s was not asked about before Execute answered: it is not promised its lifetime", d)
		}
	}
}
