package history

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// Build sums up the operations of one build (a client's
// tool_invocation_id): kept apart from the operations, so that it stays
// whole when they fall out of the history.
type Build struct {
	ID string `json:"id"`
	// Name is what the client called the build (Operation.BuildName), ""
	// when it gave none (Bazel): pages then show the ID.
	Name        string    `json:"name,omitempty"`
	Correlated  string    `json:"correlated,omitempty"`
	Tool        string    `json:"tool,omitempty"`
	ToolVersion string    `json:"tool_version,omitempty"`
	Instance    string    `json:"instance,omitempty"`
	First       time.Time `json:"first"` // the first operation's acceptance
	Last        time.Time `json:"last"`  // the last one's end
	// Executed counts the operations a worker ran, CacheHits those
	// answered from the action cache, Failed those with an error status
	// or a non-zero exit code (of either kind).
	Executed  int `json:"executed"`
	CacheHits int `json:"cache_hits"`
	Failed    int `json:"failed"`
	// QueueHist counts the executed operations' queue times in the
	// buckets queueBounds ends (the last one open).
	QueueHist   []int64 `json:"queue_hist,omitempty"`
	OutputBytes int64   `json:"output_bytes,omitempty"`
	// CPU sums the executed operations' CPU time (Operation.CPU).
	CPU time.Duration `json:"cpu,omitempty"`
	// BytesUp and BytesDown are the blob bytes the build's client
	// uploaded to the CAS and downloaded from it (ByteStream, the batch
	// calls, and outputs inlined in GetActionResult), as sent: compressed
	// transfers count compressed (Recorder.AddTraffic).
	BytesUp   int64 `json:"bytes_up,omitempty"`
	BytesDown int64 `json:"bytes_down,omitempty"`
}

// queueBounds are the upper ends of the queue time histogram's buckets.
var queueBounds = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour,
}

// add counts op in the build.
func (b *Build) add(op Operation) {
	if b.Tool == "" {
		b.Tool, b.ToolVersion = op.Tool, op.ToolVersion
	}
	if b.Name == "" {
		b.Name = op.BuildName
	}
	if b.Correlated == "" {
		b.Correlated = op.Correlated
	}
	if b.Instance == "" {
		b.Instance = op.Instance
	}
	start := op.Accepted
	if start.IsZero() {
		start = op.Finished
	}
	if b.First.IsZero() || start.Before(b.First) {
		b.First = start
	}
	if op.Finished.After(b.Last) {
		b.Last = op.Finished
	}
	if op.Cached {
		b.CacheHits++
	} else {
		b.Executed++
		if len(b.QueueHist) != len(queueBounds)+1 {
			b.QueueHist = make([]int64, len(queueBounds)+1)
		}
		q := op.QueueTime()
		i := 0
		for i < len(queueBounds) && q > queueBounds[i] {
			i++
		}
		b.QueueHist[i]++
	}
	if op.Failed() {
		b.Failed++
	}
	b.OutputBytes += op.OutputBytes
	b.CPU += op.CPU
}

// Duration is from the first operation's acceptance to the last one's
// end.
func (b Build) Duration() time.Duration { return b.Last.Sub(b.First) }

// QueueQuantile is the upper end of the histogram bucket holding the
// q-quantile (0 < q <= 1) of the executed operations' queue times: an
// estimate no lower than the true value (except in the last, open
// bucket, which gives its lower end). Zero when nothing was executed.
func (b Build) QueueQuantile(q float64) time.Duration {
	var n int64
	for _, c := range b.QueueHist {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := int64(q*float64(n) + 0.999999)
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i, c := range b.QueueHist {
		seen += c
		if seen >= rank {
			if i < len(queueBounds) {
				return queueBounds[i]
			}
			return queueBounds[len(queueBounds)-1]
		}
	}
	return queueBounds[len(queueBounds)-1]
}

func (b *Build) clone() Build {
	c := *b
	c.QueueHist = append([]int64(nil), b.QueueHist...)
	return c
}

func stamp(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func digestString(d *repb.Digest) string {
	if d == nil {
		return ""
	}
	return d.GetHash() + "/" + itoa(d.GetSizeBytes())
}
