package remote

import (
	"context"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/gantry-build/gantry/internal/protocol"
)

// WithCriticalPath tells the server, on the Execute calls made with the
// returned context, that work of about d waits for the action
// (protocol.CriticalPathHeader): a Gantry server that orders the
// invocation's longest work first then starts it sooner. d <= 0 sends
// nothing. The header is not part of the action, so it changes no
// cache key.
func WithCriticalPath(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, protocol.CriticalPathHeader, protocol.FormatCriticalPath(d))
}
