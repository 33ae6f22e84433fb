package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/digest"
)

// joiner joins the uploads of concurrent PutNew calls into shared
// BatchUpdateBlobs calls, as a database commits together the transactions
// that arrive during a flush: while a call is in flight, the blobs of the
// PutNew calls that arrive wait, and go together in the next call (within
// the batch limit). An upload that finds no call in flight is sent at once,
// so a lone caller waits no longer than before. A batch of compiles
// uploads its new sources a few at a time: one call each was most of what
// the uploads cost the client (a gRPC call's own work, and the wake-ups of
// its reader and writer).
type joiner struct {
	mu      sync.Mutex
	busy    bool // a call is in flight
	waiting []*joinReq
}

// errMissingStatus is the outcome of a blob a BatchUpdateBlobs response
// leaves out.
var errMissingStatus = errors.New("the server's BatchUpdateBlobs response does not mention it")

// joinReq is one PutNew waiting to be sent.
type joinReq struct {
	ctx   context.Context
	ds    []digest.Digest
	blobs map[digest.Digest][]byte
	size  int64 // the batch bytes the blobs take
	// lead receives the group this request sends (itself first) when its
	// turn comes; done receives its outcome when another request sent
	// it. Exactly one of them is sent to, once.
	lead chan []*joinReq
	done chan error
}

// joinable reports whether blobs go in one batch call, and the batch
// bytes they take.
func (c *CAS) joinable(blobs map[digest.Digest][]byte) (int64, bool) {
	var size int64
	for d := range blobs {
		if d.Size > SmallBlobLimit {
			return 0, false
		}
		size += d.Size + batchOverhead
	}
	return size, size <= c.maxBatch
}

// putJoined uploads blobs, which fit one batch, in a BatchUpdateBlobs call
// shared with other concurrent callers.
func (c *CAS) putJoined(ctx context.Context, blobs map[digest.Digest][]byte, size int64) error {
	r := &joinReq{ctx: ctx, blobs: blobs, size: size, lead: make(chan []*joinReq, 1), done: make(chan error, 1)}
	for d := range blobs {
		if err := c.check(d); err != nil {
			return err
		}
		if !d.IsEmpty() {
			r.ds = append(r.ds, d)
		}
	}
	if len(r.ds) == 0 {
		return nil
	}
	j := &c.join
	j.mu.Lock()
	if !j.busy {
		j.busy = true
		j.mu.Unlock()
		return c.sendGroup([]*joinReq{r})
	}
	j.waiting = append(j.waiting, r)
	j.mu.Unlock()
	if err := c.awaitTurn(r, ctx.Done()); err != errGaveUp {
		return err
	}
	j.mu.Lock()
	for i, w := range j.waiting {
		if w == r {
			j.waiting = append(j.waiting[:i], j.waiting[i+1:]...)
			j.mu.Unlock()
			return fmt.Errorf("uploading %d blobs with BatchUpdateBlobs: %w", len(r.ds), ctx.Err())
		}
	}
	j.mu.Unlock()
	// Already taken into a group: others may depend on this request to
	// send it, so see it through.
	return c.awaitTurn(r, nil)
}

// errGaveUp is awaitTurn's outcome when giveUp closed first.
var errGaveUp = errors.New("gave up waiting")

// awaitTurn waits until r leads a group, which it then sends, or another
// request's call has sent it, and returns r's outcome; or until giveUp
// is closed (a nil giveUp never is), returning errGaveUp.
func (c *CAS) awaitTurn(r *joinReq, giveUp <-chan struct{}) error {
	select {
	case g := <-r.lead:
		return c.sendGroup(g)
	case err := <-r.done:
		return err
	case <-giveUp:
		return errGaveUp
	}
}

// sendGroup sends the blobs of group (led by group[0], whose outcome it
// returns) in one call, tells the others theirs, and hands the next group
// of waiting requests to its leader (or marks the joiner idle).
func (c *CAS) sendGroup(group []*joinReq) error {
	outcome, callErr := c.batchUpdateGroup(group)
	var first error
	for i, r := range group {
		err := callErr
		if err == nil {
			err = batchErrors("stored", r.ds, outcome)
		}
		if err != nil && len(group) > 1 {
			err = fmt.Errorf("uploading blobs in a BatchUpdateBlobs call shared with %d other uploads: %w", len(group)-1, err)
		}
		if i == 0 {
			first = err
		} else {
			r.done <- err
		}
	}
	j := &c.join
	j.mu.Lock()
	var next []*joinReq
	var size int64
	n := 0
	for _, w := range j.waiting {
		if len(next) > 0 && size+w.size > c.maxBatch {
			break
		}
		next = append(next, w)
		size += w.size
		n++
	}
	j.waiting = j.waiting[n:]
	if len(next) == 0 {
		j.busy = false
	}
	j.mu.Unlock()
	if len(next) > 0 {
		next[0].lead <- next
	}
	return first
}

// batchUpdateGroup uploads the blobs of group in one BatchUpdateBlobs
// call, each digest once, and returns each blob's outcome. The call is
// cancelled only when every request of the group is: one caller giving up
// must not fail the others' uploads.
func (c *CAS) batchUpdateGroup(group []*joinReq) (func(digest.Digest) error, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(group[0].ctx))
	defer cancel()
	var left atomic.Int64
	left.Store(int64(len(group)))
	for _, r := range group {
		stop := context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	req := &repb.BatchUpdateBlobsRequest{InstanceName: c.instance, DigestFunction: c.fn}
	sent := make(map[digest.Digest]bool)
	var total int64
	for _, r := range group {
		for _, d := range r.ds {
			if !sent[d] {
				sent[d] = true
				req.Requests = append(req.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: d.Proto(), Data: r.blobs[d]})
				total += d.Size
			}
		}
	}
	resp, err := c.cas.BatchUpdateBlobs(ctx, req)
	if err != nil {
		if len(req.Requests) == 1 {
			return nil, fmt.Errorf("uploading blob %s with BatchUpdateBlobs: %w", group[0].ds[0], err)
		}
		return nil, fmt.Errorf("uploading %d blobs (%d bytes) with BatchUpdateBlobs: %w", len(req.Requests), total, err)
	}
	statuses := make(map[digest.Digest]*status.Status, len(resp.Responses))
	for _, r := range resp.Responses {
		d, err := digest.FromProto(c.fn, r.Digest)
		if err != nil {
			return nil, fmt.Errorf("BatchUpdateBlobs: the server answered with an invalid digest: %w", err)
		}
		statuses[d] = status.FromProto(r.Status)
	}
	return func(d digest.Digest) error {
		st, ok := statuses[d]
		if !ok {
			return errMissingStatus
		}
		return st.Err()
	}, nil
}
