package actioncache

import (
	"context"
	"errors"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// Outputs lists the blobs ar references: stdout, stderr, output files,
// and each output directory's Tree blob with the files in it, read from
// cas. A tree that is absent or not a Tree is returned in unreadable,
// not in ds; err is cas failing to read one.
func Outputs(ctx context.Context, cas blobstore.Store, fn digest.Function, ar *repb.ActionResult) (ds, unreadable []digest.Digest, err error) {
	add := func(pd *repb.Digest) {
		if pd == nil {
			return
		}
		if d, err := digest.FromProto(fn, pd); err == nil {
			ds = append(ds, d)
		}
	}
	add(ar.StdoutDigest)
	add(ar.StderrDigest)
	for _, f := range ar.OutputFiles {
		add(f.Digest)
	}
	for _, od := range ar.OutputDirectories {
		td, err := digest.FromProto(fn, od.TreeDigest)
		if err != nil {
			continue
		}
		data, err := blobstore.Get(ctx, cas, td)
		if errors.Is(err, blobstore.ErrNotFound) {
			unreadable = append(unreadable, td)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		tree := &repb.Tree{}
		if err := proto.Unmarshal(data, tree); err != nil {
			unreadable = append(unreadable, td)
			continue
		}
		ds = append(ds, td)
		for _, dir := range append([]*repb.Directory{tree.Root}, tree.Children...) {
			for _, f := range dir.GetFiles() {
				add(f.Digest)
			}
		}
	}
	return ds, unreadable, nil
}

// Promise asks cas about ar's outputs (see Outputs), which promises them
// the store's minimum lifetime (blobstore.Lifetime): a client told of
// the result may rely on them for that long. It returns those missing.
func Promise(ctx context.Context, cas blobstore.Store, fn digest.Function, ar *repb.ActionResult) ([]digest.Digest, error) {
	ds, missing, err := Outputs(ctx, cas, fn, ar)
	if err != nil {
		return nil, err
	}
	more, err := cas.FindMissing(ctx, ds)
	if err != nil {
		return nil, err
	}
	return append(missing, more...), nil
}
