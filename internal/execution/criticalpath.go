package execution

import (
	"context"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/gantry-build/gantry/internal/protocol"
)

// criticalPath is the caller's estimate of the work waiting for its
// action (protocol.CriticalPathHeader), 0 when it sent none. A value
// that does not parse is ignored with a log line, never an error: it
// only orders the caller's own actions, and a client of an older or
// newer Gantry must not fail its build over it.
func (s *Service) criticalPath(ctx context.Context) time.Duration {
	vs := metadata.ValueFromIncomingContext(ctx, protocol.CriticalPathHeader)
	if len(vs) == 0 {
		return 0
	}
	d, err := protocol.ParseCriticalPath(vs[0])
	if err != nil {
		s.log.Warn("ignoring the client's critical path estimate; its actions are ordered by their own expected durations", "err", err)
		return 0
	}
	return d
}
