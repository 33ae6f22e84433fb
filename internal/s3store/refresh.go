package s3store

import (
	"context"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// Refreshes run in the background, a few at a time; when more are asked
// for than the queue holds, the extra ones are dropped: the object is
// still old the next time it is seen used, and is refreshed then.
const (
	refreshWorkers = 4
	refreshQueue   = 4096
	refreshTimeout = 5 * time.Minute
	// maxCopySize is the largest object one CopyObject may copy; larger
	// ones are copied in parts.
	maxCopySize = 5 << 30
)

// refresher resets the age of objects that are used but old, by copying
// each onto itself with new metadata, so that the bucket's expiry rule,
// which counts age from the last write, deletes what is least recently
// used rather than what was written first.
type refresher struct {
	b       *Bucket
	jobs    chan refreshJob
	mu      sync.Mutex
	pending map[string]bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type refreshJob struct {
	name string
	size int64
}

func newRefresher(b *Bucket, workers, queue int) *refresher {
	ctx, cancel := context.WithCancel(context.Background())
	r := &refresher{b: b, jobs: make(chan refreshJob, queue), pending: map[string]bool{}, ctx: ctx, cancel: cancel}
	for range workers {
		r.wg.Add(1)
		go r.run()
	}
	return r
}

// request asks for object name of size bytes to be refreshed; it never
// blocks, and asking again while one is pending does nothing.
func (r *refresher) request(name string, size int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending[name] || r.ctx.Err() != nil {
		return
	}
	select {
	case r.jobs <- refreshJob{name, size}:
		r.pending[name] = true
	default:
	}
}

func (r *refresher) run() {
	defer r.wg.Done()
	for {
		select {
		case <-r.ctx.Done():
			return
		case j := <-r.jobs:
			r.refresh(j)
			r.mu.Lock()
			delete(r.pending, j.name)
			r.mu.Unlock()
		}
	}
}

// refresh copies one object onto itself. The copy is server-side: no
// bytes pass through this process.
func (r *refresher) refresh(j refreshJob) {
	ctx, cancel := context.WithTimeout(r.ctx, refreshTimeout)
	defer cancel()
	b := r.b
	dst := minio.CopyDestOptions{
		Bucket:          b.cfg.Bucket,
		Object:          j.name,
		ReplaceMetadata: true,
		UserMetadata:    map[string]string{"Gantry-Refreshed": time.Now().UTC().Format(time.RFC3339)},
	}
	src := minio.CopySrcOptions{Bucket: b.cfg.Bucket, Object: j.name}
	start := time.Now()
	var err error
	if j.size > maxCopySize {
		_, err = b.client.ComposeObject(ctx, dst, src)
	} else {
		_, err = b.client.CopyObject(ctx, dst, src)
	}
	b.observe("copy", start, err)
	switch {
	case err == nil:
		b.exist.add(j.name, time.Now())
	case isNotFound(err):
		b.exist.forget(j.name)
	default:
		b.log.Warn("refreshing an object's age in the bucket failed; it is tried again when next used", "object", j.name, "err", b.fail("copy", err))
	}
}

// stop ends the refreshes, waiting for those running.
func (r *refresher) stop() {
	r.mu.Lock()
	r.cancel()
	r.mu.Unlock()
	r.wg.Wait()
}

// used notes that blob object name, last written at modified, was just
// used: it is refreshed if it is old, else remembered as present.
func (b *Bucket) used(name string, size int64, modified time.Time) {
	if !b.refreshIfOld(name, size, modified) {
		b.exist.add(name, modified)
	}
}

// refreshIfOld asks for object name to be refreshed if it was last
// written RefreshAfter ago or earlier, and reports whether it was.
func (b *Bucket) refreshIfOld(name string, size int64, modified time.Time) bool {
	if modified.After(b.freshSince()) {
		return false
	}
	b.fresh.request(name, size)
	return true
}

// freshSince is the oldest modification time of an object remembered as
// present that is still trusted: one older is due for a refresh.
func (b *Bucket) freshSince() time.Time { return time.Now().Add(-b.cfg.RefreshAfter) }
