package execution

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// StageUpdatesHeader is the request header with which a client of Execute
// (or WaitExecution) says which Operation messages it wants. With the
// value "off" the stream carries only the first message (which names the
// operation, for CancelOperation) and the final one, not an update for
// every stage in between (queued, executing). REAPI leaves the updates to
// the server; Bazel shows them, but Gantry's own client does nothing with
// them, and each is a message to encode, send, wake up for and decode.
const StageUpdatesHeader = "gantry-stage-updates"

// wantsStageUpdates reports whether the caller wants an Operation message
// for every stage: all callers do unless they said "off".
func wantsStageUpdates(ctx context.Context) bool {
	for _, v := range metadata.ValueFromIncomingContext(ctx, StageUpdatesHeader) {
		if v == "off" {
			return false
		}
	}
	return true
}
