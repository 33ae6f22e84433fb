package protocol

import (
	"fmt"
	"strconv"
	"time"
)

// CriticalPathHeader is the request header with which a client of
// Execute tells how much of its work waits for this action: its
// estimate of the longest chain of dependent actions that can start
// only after this one (the sum of their expected durations), in whole
// milliseconds, decimal. gantry batch sends it from its job graph. The
// server uses it for one thing only: within the client's invocation,
// when it orders the longest expected work first, an action ranks by
// its own expected duration plus this (critical path first). It is a
// header, not a platform property, so that it is not part of the Action
// digest and so not of the ActionCache key.
const CriticalPathHeader = "gantry-critical-path"

// MaxCriticalPath bounds the value of CriticalPathHeader: a longer
// estimate ranks as this one.
const MaxCriticalPath = 7 * 24 * time.Hour

// maxCriticalPathDigits bounds the header's length: enough for
// MaxCriticalPath in milliseconds with leading zeros to spare.
const maxCriticalPathDigits = 15

// ParseCriticalPath reads a CriticalPathHeader value: decimal digits
// only (no sign, no unit, no spaces), at most 15 of them. A value above
// MaxCriticalPath gives MaxCriticalPath.
func ParseCriticalPath(v string) (time.Duration, error) {
	if v == "" || len(v) > maxCriticalPathDigits {
		return 0, fmt.Errorf("%s must be 1 to %d decimal digits (milliseconds), not %d bytes", CriticalPathHeader, maxCriticalPathDigits, len(v))
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, fmt.Errorf("%s must be whole milliseconds in decimal digits, not %.40q", CriticalPathHeader, v)
		}
	}
	ms, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", CriticalPathHeader, err)
	}
	if ms > uint64(MaxCriticalPath/time.Millisecond) {
		return MaxCriticalPath, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// FormatCriticalPath is the CriticalPathHeader value of d (negative: 0;
// beyond MaxCriticalPath: MaxCriticalPath).
func FormatCriticalPath(d time.Duration) string {
	d = min(max(d, 0), MaxCriticalPath)
	return strconv.FormatInt(d.Milliseconds(), 10)
}
