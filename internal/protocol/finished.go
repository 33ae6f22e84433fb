package protocol

import (
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/digest"
)

// Finished describes an operation that finished, for logs, metrics and
// the history: what the execution service tells its observers.
type Finished struct {
	Name         string
	Instance     string
	ActionDigest digest.Digest
	// Queue is the provision queue it waited in ("" for a cache hit).
	Queue string
	// Invocation is its invocation path, one value per KeyNames entry;
	// nil when not known.
	Invocation []string
	// Accepted is when Execute took the action; zero when not known.
	Accepted time.Time
	// ResultAt is when the scheduler took the result (the server's
	// clock); zero for a cache hit.
	ResultAt time.Time
	Response *repb.ExecuteResponse
	// Metadata is the RequestMetadata the Execute call carried, and
	// BuildName the build name it sent (protocol.BuildNameHeader);
	// Command what the report reads of the action's command, its program
	// and first output, when Execute read it (not for a cache hit). All three are unknown (nil, "") for an operation submitted
	// before the server restarted.
	Metadata  *repb.RequestMetadata
	BuildName string
	Command   *repb.Command
	// Retries are the times the action was taken from a worker (lost,
	// pre-empted, suspended), oldest first.
	Retries []Retry
	// Expected is the action's expected wall time from the scheduler's
	// duration history when it ran; 0 when none was known (or a cache
	// hit).
	Expected time.Duration
}

// Retry is one time an operation's action was taken from (or stopped on)
// its worker, as the scheduler noted it (scheduler.Retry).
type Retry struct {
	At     time.Time
	Worker string
	// Kind is the scheduler's RetryKind ("worker lost", "pre-empted"...).
	Kind   string
	Reason string
}
