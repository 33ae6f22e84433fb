package asset

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// Kind is what an index entry points at.
type Kind uint8

// Kinds of entries.
const (
	// Blob: a file's contents.
	Blob Kind = iota + 1
	// Directory: the digest of a REAPI Directory, root of a tree.
	Directory
)

func (k Kind) String() string {
	if k == Directory {
		return "directory"
	}
	return "blob"
}

// Entry is what the index says about one asset.
type Entry struct {
	Digest digest.Digest
	// Fetched is when the content was fetched or pushed.
	Fetched time.Time
	// ExpireAt, when set, is when the entry stops being served.
	ExpireAt time.Time
}

// Index maps an asset (instance, URI, identifying qualifiers, digest
// function) to the digest of its content. It is kept in the ActionCache's
// store, so it is as durable and as shared between frontends as the
// ActionCache (memory, disk or the bucket), under keys no REAPI client
// can reach: the instance name passed to the store has the segment
// "actions", which every REAPI request's instance name is refused with
// (digest.ValidateInstanceName), so UpdateActionResult cannot forge an
// entry. An entry is an ActionResult whose auxiliary metadata is the
// PushBlobRequest or PushDirectoryRequest that would record it, and
// whose worker_completed_timestamp is the fetch time.
type Index struct {
	ac  actioncache.Store
	cas blobstore.Store
}

// NewIndex returns the index kept in ac, checking entries against cas.
func NewIndex(ac actioncache.Store, cas blobstore.Store) *Index {
	return &Index{ac: ac, cas: cas}
}

// indexInstance is the instance name the entries of instance are kept
// under in the ActionCache store.
func indexInstance(instance string) string {
	if instance == "" {
		return "actions/remote-asset"
	}
	return instance + "/actions/remote-asset"
}

// key is the entry's key: a digest of everything that identifies it.
func key(kind Kind, fn digest.Function, uri string, qs []*rapb.Qualifier) digest.Digest {
	h := sha256.New()
	field := func(s string) {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	field("gantry remote asset v1")
	field(kind.String())
	field(digest.Name(fn))
	field(uri)
	for _, q := range qs {
		field(q.Name)
		field(q.Value)
	}
	return digest.Digest{Function: repb.DigestFunction_SHA256, Hash: digest.HexOf(h.Sum(nil)), Size: 1}
}

// Lookup returns the entry of the asset if there is one that is not
// expired, not older than oldest, and whose content is all in the CAS.
func (x *Index) Lookup(ctx context.Context, instance string, kind Kind, fn digest.Function, uri string, qs []*rapb.Qualifier, oldest, now time.Time) (Entry, bool, error) {
	ar, err := x.ac.Get(ctx, indexInstance(instance), key(kind, fn, uri, qs))
	if errors.Is(err, actioncache.ErrNotFound) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	e, ok := decodeEntry(kind, fn, ar)
	if !ok || (!e.ExpireAt.IsZero() && !now.Before(e.ExpireAt)) || e.Fetched.Before(oldest) {
		return Entry{}, false, nil
	}
	complete, err := x.complete(ctx, kind, e.Digest)
	if err != nil || !complete {
		return Entry{}, false, err
	}
	return e, true, nil
}

// Record stores the entry of the asset.
func (x *Index) Record(ctx context.Context, instance string, kind Kind, uri string, qs []*rapb.Qualifier, e Entry) error {
	var expire *timestamppb.Timestamp
	if !e.ExpireAt.IsZero() {
		expire = timestamppb.New(e.ExpireAt)
	}
	var msg proto.Message
	if kind == Directory {
		msg = &rapb.PushDirectoryRequest{InstanceName: instance, Uris: []string{redact(uri)}, Qualifiers: qs, ExpireAt: expire, RootDirectoryDigest: e.Digest.Proto(), DigestFunction: e.Digest.Function}
	} else {
		msg = &rapb.PushBlobRequest{InstanceName: instance, Uris: []string{redact(uri)}, Qualifiers: qs, ExpireAt: expire, BlobDigest: e.Digest.Proto(), DigestFunction: e.Digest.Function}
	}
	a, err := anypb.New(msg)
	if err != nil {
		return err
	}
	ar := &repb.ActionResult{ExecutionMetadata: &repb.ExecutedActionMetadata{
		Worker:                   "gantry remote asset",
		WorkerCompletedTimestamp: timestamppb.New(e.Fetched),
		AuxiliaryMetadata:        []*anypb.Any{a},
	}}
	return x.ac.Put(ctx, indexInstance(instance), key(kind, e.Digest.Function, uri, qs), ar)
}

func decodeEntry(kind Kind, fn digest.Function, ar *repb.ActionResult) (Entry, bool) {
	md := ar.GetExecutionMetadata()
	if len(md.GetAuxiliaryMetadata()) != 1 {
		return Entry{}, false
	}
	var pd *repb.Digest
	var expire *timestamppb.Timestamp
	if kind == Directory {
		m := &rapb.PushDirectoryRequest{}
		if md.AuxiliaryMetadata[0].UnmarshalTo(m) != nil {
			return Entry{}, false
		}
		pd, expire = m.RootDirectoryDigest, m.ExpireAt
	} else {
		m := &rapb.PushBlobRequest{}
		if md.AuxiliaryMetadata[0].UnmarshalTo(m) != nil {
			return Entry{}, false
		}
		pd, expire = m.BlobDigest, m.ExpireAt
	}
	d, err := digest.FromProto(fn, pd)
	if err != nil {
		return Entry{}, false
	}
	e := Entry{Digest: d, Fetched: md.GetWorkerCompletedTimestamp().AsTime()}
	if expire != nil {
		e.ExpireAt = expire.AsTime()
	}
	return e, true
}

// complete reports whether everything the entry points at is in the CAS
// (the ActionCache's completeness check: a hit whose blobs were evicted
// is a miss, and the origin is asked again). FindMissing also extends
// the blobs' lifetimes.
func (x *Index) complete(ctx context.Context, kind Kind, d digest.Digest) (bool, error) {
	if kind == Blob {
		ok, err := blobstore.Has(ctx, x.cas, d)
		return ok, err
	}
	want, ok, err := treeDigests(ctx, x.cas, d)
	if err != nil || !ok {
		return false, err
	}
	missing, err := x.cas.FindMissing(ctx, want)
	return len(missing) == 0, err
}

// treeDigests lists the Directory messages and files of the tree rooted
// at root; ok is false when a Directory is missing or does not parse.
func treeDigests(ctx context.Context, cas blobstore.Store, root digest.Digest) (ds []digest.Digest, ok bool, err error) {
	queue := []digest.Digest{root}
	seen := map[digest.Digest]bool{root: true}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		ds = append(ds, d)
		data, err := blobstore.Get(ctx, cas, d)
		if errors.Is(err, blobstore.ErrNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		dir := &repb.Directory{}
		if proto.Unmarshal(data, dir) != nil {
			return nil, false, nil
		}
		for _, f := range dir.Files {
			if fd, err := digest.FromProto(d.Function, f.Digest); err == nil {
				ds = append(ds, fd)
			}
		}
		for _, sub := range dir.Directories {
			sd, err := digest.FromProto(d.Function, sub.Digest)
			if err != nil {
				return nil, false, nil
			}
			if !seen[sd] {
				seen[sd] = true
				queue = append(queue, sd)
			}
		}
	}
	return ds, true, nil
}
