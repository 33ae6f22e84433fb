package status

import (
	"fmt"
	"time"

	"github.com/gantry-build/gantry/internal/scheduler"
)

// tookVsExpected is what a finished operation's page says of its run
// against the duration history: how long it executed, and that as a
// multiple of the expected time ("" when either is unknown).
func tookVsExpected(info scheduler.OperationInfo) (took time.Duration, ratio string) {
	if !info.Done || info.Expected <= 0 {
		return 0, ""
	}
	md := info.Response.GetResult().GetExecutionMetadata()
	start, end := md.GetExecutionStartTimestamp(), md.GetExecutionCompletedTimestamp()
	if !start.IsValid() || !end.IsValid() || !end.AsTime().After(start.AsTime()) {
		return 0, ""
	}
	took = end.AsTime().Sub(start.AsTime())
	return took.Round(time.Millisecond), fmt.Sprintf("%.2f", took.Seconds()/info.Expected.Seconds())
}

// expectedFromHistory fills a finished operation's expected time, which
// the scheduler forgets across a restart, from its history record.
func (h *Handler) expectedFromHistory(info *scheduler.OperationInfo) {
	if !info.Done || info.Expected > 0 || h.hist == nil {
		return
	}
	if o, ok := h.hist.Operation(info.Name); ok {
		info.Expected = o.Expected
	}
}
