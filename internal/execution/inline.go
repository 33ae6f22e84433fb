package execution

import (
	"context"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/protocol"
)

// executeInlineLimit bounds the bytes of output files one ExecuteResponse
// carries inline, well below gRPC's default 4 MiB message limit.
const executeInlineLimit = 1 << 20

// wantsInline reports whether the caller asked for inlined outputs.
func wantsInline(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, protocol.InlineOutputsHeader)) > 0
}

// withInlineOutputs returns resp with the contents of its result's output
// files filled in from the CAS, up to executeInlineLimit, if the caller
// asked for them; resp itself (the scheduler's) is never changed. A file
// that cannot be read is left for the client to fetch.
func (s *Service) withInlineOutputs(ctx context.Context, resp *repb.ExecuteResponse, fn digest.Function) *repb.ExecuteResponse {
	if resp == nil || len(resp.GetResult().GetOutputFiles()) == 0 || s.cas == nil || !wantsInline(ctx) {
		return resp
	}
	out := proto.Clone(resp).(*repb.ExecuteResponse)
	actioncache.Inline(ctx, s.cas, fn, out.Result, actioncache.Inlining{
		Files: func(string) bool { return true }, Budget: executeInlineLimit})
	return out
}
