package execution

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/gantry-build/gantry/internal/protocol"
)

// wantsStageUpdates reports whether the caller wants an Operation message
// for every stage: all callers do unless they said "off".
func wantsStageUpdates(ctx context.Context) bool {
	for _, v := range metadata.ValueFromIncomingContext(ctx, protocol.StageUpdatesHeader) {
		if v == "off" {
			return false
		}
	}
	return true
}
