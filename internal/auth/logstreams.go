package auth

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/logstream"
)

// Live output streams (internal/logstream) travel over ByteStream but are
// not blobs: reading one needs what reading its operation needs (the
// execute permission on the stream's instance); writing an action's
// stream is a worker's job (the worker permission), writing a stream a
// client created needs the execute permission on its instance (the
// secret write name does the rest).
const logStreamCreate = "/build.bazel.remote.logstream.v1.LogStreamService/CreateLogStream"

// authorizeLogStream checks a ByteStream call on the log stream name.
func (a *Authorizer) authorizeLogStream(p *Policy, id *Identity, m method, fullMethod, name string) error {
	if m.from == fromReadResource {
		n, err := logstream.ParseRead(name)
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		return a.check(p, id, PermExecute, n.Instance, fullMethod, "")
	}
	n, err := logstream.ParseWrite(name)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if n.Created() {
		return a.check(p, id, PermExecute, n.Instance, fullMethod, "")
	}
	return a.check(p, id, PermWorker, n.Instance, fullMethod, "")
}

// logStreamParent is a CreateLogStreamRequest's instance, its parent.
func logStreamParent(req any) (string, bool) {
	r, ok := req.(interface{ GetParent() string })
	if !ok {
		return "", false
	}
	return r.GetParent(), true
}
