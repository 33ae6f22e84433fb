package frontend

import (
	"context"
	"errors"
	"fmt"
	"slices"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// GetActionResult implements REAPI ActionCache. A result is served only
// when every blob it references is in the CAS, so a client never gets a
// hit it cannot download.
func (s *Server) GetActionResult(ctx context.Context, req *repb.GetActionResultRequest) (*repb.ActionResult, error) {
	if err := checkInstance(req.InstanceName); err != nil {
		return nil, err
	}
	fn, err := requestFunction(req.DigestFunction)
	if err != nil {
		return nil, err
	}
	ad, err := parseDigest(fn, req.ActionDigest, "action_digest")
	if err != nil {
		return nil, err
	}
	ar, err := s.LookupActionResult(ctx, req.InstanceName, ad)
	if err != nil {
		return nil, err
	}
	var files func(string) bool
	if len(req.InlineOutputFiles) > 0 {
		files = func(p string) bool { return slices.Contains(req.InlineOutputFiles, p) }
	}
	actioncache.Inline(ctx, s.cas, ad.Function, ar, actioncache.Inlining{
		Stdout: req.InlineStdout, Stderr: req.InlineStderr, Files: files, Budget: s.opts.InlineLimit})
	return ar, nil
}

// LookupActionResult returns the cached result for an action if it is
// complete, or NOT_FOUND. The Execution service shares it.
func (s *Server) LookupActionResult(ctx context.Context, instance string, ad digest.Digest) (*repb.ActionResult, error) {
	ar, err := s.ac.Get(ctx, instance, ad)
	if errors.Is(err, actioncache.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "no cached result for action %s", ad)
	}
	if err != nil {
		return nil, storeError(err, "reading the action cache")
	}
	// Asking the CAS for the outputs also promises them the store's
	// minimum lifetime (storage.cas.min_lifetime), which clients that
	// keep only digests rely on: so it is done even without the check.
	missing, err := s.missingOutputs(ctx, ad.Function, ar)
	switch {
	case !s.opts.CompletenessCheck:
		return ar, nil
	case err != nil:
		return nil, err
	case len(missing) > 0:
		return nil, status.Errorf(codes.NotFound, "the cached result for action %s references %d blobs no longer in the CAS (first: %s); the action must run again", ad, len(missing), missing[0])
	}
	return ar, nil
}

// missingOutputs returns those of the blobs ar references that the
// CAS lacks (see actioncache.Promise).
func (s *Server) missingOutputs(ctx context.Context, fn digest.Function, ar *repb.ActionResult) ([]digest.Digest, error) {
	missing, err := actioncache.Promise(ctx, s.cas, fn, ar)
	if err != nil {
		return nil, storeError(err, "checking outputs")
	}
	return missing, nil
}

// UpdateActionResult implements REAPI ActionCache. Inline contents the
// client sent are moved into the CAS, so stored results only hold digests.
func (s *Server) UpdateActionResult(ctx context.Context, req *repb.UpdateActionResultRequest) (*repb.ActionResult, error) {
	if err := checkInstance(req.InstanceName); err != nil {
		return nil, err
	}
	fn, err := requestFunction(req.DigestFunction)
	if err != nil {
		return nil, err
	}
	ad, err := parseDigest(fn, req.ActionDigest, "action_digest")
	if err != nil {
		return nil, err
	}
	if req.ActionResult == nil {
		return nil, invalid("action_result is missing")
	}
	ar := proto.Clone(req.ActionResult).(*repb.ActionResult)
	if err := s.normalizeResult(ctx, ad.Function, ar); err != nil {
		return nil, err
	}
	if err := s.ac.Put(ctx, req.InstanceName, ad, ar); err != nil {
		return nil, storeError(err, "writing the action cache")
	}
	return ar, nil
}

// normalizeResult validates every digest in ar and moves inline data into
// the CAS.
func (s *Server) normalizeResult(ctx context.Context, fn digest.Function, ar *repb.ActionResult) error {
	moveRaw := func(raw *[]byte, pd **repb.Digest, field string) error {
		if len(*raw) > 0 {
			d := digest.Compute(fn, *raw)
			if *pd != nil && ((*pd).Hash != d.Hash || (*pd).SizeBytes != d.Size) {
				return invalid("%s: the inline contents do not match the digest given", field)
			}
			if err := blobstore.Put(ctx, s.cas, d, *raw); err != nil {
				return storeError(err, field)
			}
			*pd = d.Proto()
			*raw = nil
		}
		if *pd != nil {
			if _, err := parseDigest(fn, *pd, field); err != nil {
				return err
			}
		}
		return nil
	}
	if err := moveRaw(&ar.StdoutRaw, &ar.StdoutDigest, "action_result.stdout_digest"); err != nil {
		return err
	}
	if err := moveRaw(&ar.StderrRaw, &ar.StderrDigest, "action_result.stderr_digest"); err != nil {
		return err
	}
	for i, f := range ar.OutputFiles {
		field := fmt.Sprintf("action_result.output_files[%d]", i)
		if f.Path == "" {
			return invalid("%s.path is empty", field)
		}
		if f.Digest == nil && len(f.Contents) == 0 {
			return invalid("%s.digest is missing", field)
		}
		if err := moveRaw(&f.Contents, &f.Digest, field+".digest"); err != nil {
			return err
		}
	}
	for i, od := range ar.OutputDirectories {
		if _, err := parseDigest(fn, od.TreeDigest, fmt.Sprintf("action_result.output_directories[%d].tree_digest", i)); err != nil {
			return err
		}
	}
	return nil
}

// StoreActionResult validates ar, moves inline data into the CAS and writes
// it to the ActionCache. Workers' results arrive here.
func (s *Server) StoreActionResult(ctx context.Context, instance string, ad digest.Digest, ar *repb.ActionResult) error {
	ar = proto.Clone(ar).(*repb.ActionResult)
	if err := s.normalizeResult(ctx, ad.Function, ar); err != nil {
		return err
	}
	if err := s.ac.Put(ctx, instance, ad, ar); err != nil {
		return storeError(err, "writing the action cache")
	}
	return nil
}
