package asset

import (
	"context"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gantry-build/gantry/internal/digest"
)

// PushBlob implements rapb.PushServer: it records, for every URI, the
// association a FetchBlob with the same qualifiers finds. The blob must be
// in the CAS already.
func (s *Service) PushBlob(ctx context.Context, req *rapb.PushBlobRequest) (*rapb.PushBlobResponse, error) {
	if err := s.push(ctx, Blob, req.InstanceName, req.DigestFunction, req.Uris, req.Qualifiers, req.ExpireAt, req.BlobDigest, "blob_digest"); err != nil {
		return nil, err
	}
	return &rapb.PushBlobResponse{}, nil
}

// PushDirectory implements rapb.PushServer, as PushBlob for a Directory
// tree, which must be in the CAS whole.
func (s *Service) PushDirectory(ctx context.Context, req *rapb.PushDirectoryRequest) (*rapb.PushDirectoryResponse, error) {
	if err := s.push(ctx, Directory, req.InstanceName, req.DigestFunction, req.Uris, req.Qualifiers, req.ExpireAt, req.RootDirectoryDigest, "root_directory_digest"); err != nil {
		return nil, err
	}
	return &rapb.PushDirectoryResponse{}, nil
}

func (s *Service) push(ctx context.Context, kind Kind, instance string, fnValue repb.DigestFunction_Value, uris []string, qs []*rapb.Qualifier, expireAt *timestamppb.Timestamp, pd *repb.Digest, field string) error {
	r, err := s.parse(instance, fnValue, uris, qs, nil)
	if err != nil {
		return err
	}
	if pd == nil {
		return status.Errorf(codes.InvalidArgument, "%s is missing", field)
	}
	d, err := digest.FromProto(r.fn, pd)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%s: %v", field, err)
	}
	complete, err := s.index.complete(ctx, kind, d)
	if err != nil {
		return status.Errorf(codes.Unavailable, "checking %s in the CAS: %v", d, err)
	}
	if !complete {
		what := "the blob"
		if kind == Directory {
			what = "the directory tree (every Directory message and file)"
		}
		return status.Errorf(codes.FailedPrecondition, "%s %s is not in the CAS; upload %s first, then push", field, d, what)
	}
	e := Entry{Digest: d, Fetched: s.opts.Now()}
	if expireAt != nil {
		e.ExpireAt = expireAt.AsTime()
		if !e.ExpireAt.After(e.Fetched) {
			return status.Errorf(codes.InvalidArgument, "expire_at %s is not in the future", e.ExpireAt.UTC().Format("2006-01-02T15:04:05Z"))
		}
	}
	for _, u := range r.uris {
		if err := s.index.Record(ctx, r.instance, kind, u, r.q.Identifying(), e); err != nil {
			return status.Errorf(codes.Unavailable, "recording %s in the remote asset index: %v", u, err)
		}
	}
	return nil
}
