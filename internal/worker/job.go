package worker

import (
	"errors"
	"fmt"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// job is one lease on its way through the stages: its assignment, parsed,
// the CAS of its instance, the ExecutedActionMetadata the driver stamps
// (lease.go), and what the stages took for it (slots, the exec root, the
// sandbox, the output captures), which the completion path lets go of.
// Only the lease's goroutine uses it.
type job struct {
	lease  *activeLease
	a      *workerpb.Assignment
	ad     digest.Digest
	action *repb.Action
	cmd    *repb.Command
	cas    blobstore.Store
	md     *repb.ExecutedActionMetadata
	holds  []func()
}

// hold records release as something the job took, to be let go of when
// it leaves the worker (in reverse order of taking).
func (j *job) hold(release func()) {
	j.holds = append(j.holds, release)
}

// releaseAll lets go of everything the job holds, last taken first.
func (j *job) releaseAll() {
	holds := j.holds
	j.holds = nil
	for i := len(holds) - 1; i >= 0; i-- {
		holds[i]()
	}
}

// parse reads the assignment's action digest, Action and Command.
func (j *job) parse() error {
	ad, err := actionDigest(j.a)
	if err != nil {
		return failf(codes.Internal, "worker received a bad assignment: %v", err)
	}
	j.ad = ad
	j.action, j.cmd = &repb.Action{}, &repb.Command{}
	if err := proto.Unmarshal(j.a.Action, j.action); err != nil {
		return failf(codes.InvalidArgument, "action %s does not parse: %v", ad, err)
	}
	if err := proto.Unmarshal(j.a.Command, j.cmd); err != nil {
		return failf(codes.InvalidArgument, "command of action %s does not parse: %v", ad, err)
	}
	return nil
}

func actionDigest(a *workerpb.Assignment) (digest.Digest, error) {
	if a.ActionDigest == nil {
		return digest.Digest{}, errors.New("assignment has no action digest")
	}
	return digest.Parse(digest.Function(a.ActionDigest.DigestFunction), a.ActionDigest.Hash, a.ActionDigest.SizeBytes)
}

// statusError is a stage's failure as the scheduler is told of it: a gRPC
// status and, for missing inputs, the blobs the client must upload.
type statusError struct {
	code    codes.Code
	msg     string
	missing []string // "blobs/{hash}/{size}", the REAPI's MISSING subjects
}

func (e *statusError) Error() string { return e.msg }

func failf(code codes.Code, format string, args ...any) *statusError {
	return &statusError{code: code, msg: fmt.Sprintf(format, args...)}
}

// request is the CompleteRequest that reports the failure.
func (e *statusError) request() *workerpb.CompleteRequest {
	return &workerpb.CompleteRequest{StatusCode: int32(e.code), StatusMessage: e.msg, MissingBlobs: e.missing}
}
