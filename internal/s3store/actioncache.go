package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/minio/minio-go/v7"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/digest"
)

// maxActionResult bounds the size of a stored ActionResult read back; a
// larger object is not one Gantry wrote.
const maxActionResult = 64 << 20

// ActionCache is the bucket's action cache. Entries are kept per
// instance name, as in every action cache of Gantry.
type ActionCache struct{ b *Bucket }

var _ actioncache.Store = (*ActionCache)(nil)

func (a *ActionCache) name(instance string, d digest.Digest) string {
	return a.b.objectName("ac", actioncache.Key(instance, d))
}

// Get implements actioncache.Store. An entry that does not parse reads
// as a miss: the action runs again and its new result replaces it.
func (a *ActionCache) Get(ctx context.Context, instance string, d digest.Digest) (*repb.ActionResult, error) {
	name := a.name(instance, d)
	start := time.Now()
	body, info, _, err := a.b.core.GetObject(ctx, a.b.cfg.Bucket, name, minio.GetObjectOptions{})
	a.b.observe("get", start, err)
	if err != nil {
		if isNotFound(err) {
			return nil, actioncache.ErrNotFound
		}
		return nil, a.b.fail("GET "+name, err)
	}
	defer body.Close()
	if info.Size > maxActionResult {
		return nil, actioncache.ErrNotFound
	}
	data, err := io.ReadAll(io.LimitReader(body, maxActionResult))
	if err != nil {
		return nil, a.b.fail("GET "+name, err)
	}
	ar := &repb.ActionResult{}
	if err := proto.Unmarshal(data, ar); err != nil {
		a.b.log.Warn("an action cache entry in the bucket does not parse; it reads as a miss", "object", name, "err", err)
		return nil, actioncache.ErrNotFound
	}
	a.b.refreshIfOld(name, info.Size, info.LastModified)
	return ar, nil
}

// Put implements actioncache.Store.
func (a *ActionCache) Put(ctx context.Context, instance string, d digest.Digest, ar *repb.ActionResult) error {
	data, err := proto.Marshal(ar)
	if err != nil {
		return fmt.Errorf("encoding the action result: %w", err)
	}
	name := a.name(instance, d)
	sum := sha256.Sum256(data)
	start := time.Now()
	_, err = a.b.core.PutObject(ctx, a.b.cfg.Bucket, name, bytes.NewReader(data), int64(len(data)), "", hex.EncodeToString(sum[:]), minio.PutObjectOptions{})
	a.b.observe("put", start, err)
	return a.b.fail("PUT "+name, err)
}
