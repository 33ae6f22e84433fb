package execution

import (
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// stage is one interval of an operation's life, for its completion line.
type stage struct {
	name string
	d    time.Duration
}

// stageTimes are the readings an operation's stages are cut from. Accepted,
// ResultAt and End are the server's clock; the metadata's timestamps are
// the worker's own clock.
type stageTimes struct {
	// Accepted is when Execute took the request (zero: not known).
	Accepted time.Time
	// ResultAt is when the scheduler took the operation's result (zero:
	// not known, as for a cache hit).
	ResultAt time.Time
	// End is the one clock reading that ends the operation, taken when
	// its completion is logged.
	End time.Time
	// Worker is the result's ExecutedActionMetadata; nil when no worker
	// ran it for this operation (a cache hit, a failure by the scheduler).
	Worker *repb.ExecutedActionMetadata
}

// operationStages cuts the operation's life, from Accepted to End, into
// contiguous stages that add up to total exactly (in whole microseconds)
// and are never negative:
//
//	queued       accepted → worker start (waiting for a worker, the lease
//	             on its way)
//	input_fetch  worker start → input fetch completed
//	wait_core    input fetch completed → execution start (waiting on the
//	             worker for a free core)
//	execute      execution start → execution completed
//	upload       execution completed → worker completed (a report slot,
//	             uploading outputs)
//	report       worker completed → End (the result on its way to the
//	             scheduler, stored, reported)
//
// Without worker timestamps the stages are queued (to ResultAt) and report.
// hasTotal is false when Accepted is not known: then only the worker's
// stages are given.
//
// Clock skew: the worker's stages are differences of the worker's own
// timestamps, and report ends, and queued starts, on the server's clock, so
// a skewed worker clock moves nothing but the one boundary where the
// clocks meet, worker start: it is placed at the worker's reading, clamped
// between Accepted and ResultAt less the worker's span. A worker clock
// ahead of the server's thus lengthens queued and shortens report (to no
// less than End - ResultAt, which is all server time); one behind does the
// opposite (queued no less than 0). If the worker's span is longer than
// Accepted → ResultAt (the operation joined a task already running, or the
// worker's clock runs fast), the worker's stages are cut from the front:
// time before the operation was accepted is not its own.
func operationStages(in stageTimes) (stages []stage, total time.Duration, hasTotal bool) {
	worker := workerBoundaries(in.Worker)
	if in.Accepted.IsZero() {
		for i := 1; i < len(worker); i++ {
			stages = append(stages, stage{workerStages[i-1], worker[i] - worker[i-1]})
		}
		return stages, 0, false
	}
	total = max(in.End.Sub(in.Accepted), 0)
	r := total
	if !in.ResultAt.IsZero() {
		r = min(max(in.ResultAt.Sub(in.Accepted), 0), total)
	}
	// bounds are offsets from Accepted on the server's timeline:
	// queued's end, then the end of each worker stage.
	var bounds []time.Duration
	if len(worker) > 0 {
		span := worker[len(worker)-1]
		var at time.Duration // worker start on the server's timeline
		if span <= r {
			at = min(max(in.Worker.WorkerStartTimestamp.AsTime().Sub(in.Accepted), 0), r-span)
		} else {
			at = r - span // ends at ResultAt; the front is cut below
		}
		for _, w := range worker {
			bounds = append(bounds, max(at+w, 0))
		}
	} else {
		bounds = []time.Duration{r}
	}
	// Whole microseconds, as logged: truncating every boundary (not every
	// stage) keeps them in order and the sum equal to the total.
	total = total.Truncate(time.Microsecond)
	prev := time.Duration(0)
	names := append([]string{"queued"}, workerStages...)
	for i, b := range bounds {
		b = min(b.Truncate(time.Microsecond), total)
		stages = append(stages, stage{names[i], b - prev})
		prev = b
	}
	stages = append(stages, stage{"report", total - prev})
	return stages, total, true
}

// workerStages name the intervals between workerBoundaries.
var workerStages = []string{"input_fetch", "wait_core", "execute", "upload"}

// workerBoundaries are the worker's start, input fetch completed,
// execution start, execution completed and worker completed, as offsets
// from its start on its own clock, made non-decreasing (a missing
// timestamp, of a stage the worker never reached, ends no time). nil when
// the worker's start or completion is missing.
func workerBoundaries(md *repb.ExecutedActionMetadata) []time.Duration {
	start, end := md.GetWorkerStartTimestamp(), md.GetWorkerCompletedTimestamp()
	if start == nil || end == nil {
		return nil
	}
	t0 := start.AsTime()
	out := make([]time.Duration, 0, 5)
	prev := time.Duration(0)
	for _, ts := range []*timestamppb.Timestamp{start, md.GetInputFetchCompletedTimestamp(), md.GetExecutionStartTimestamp(), md.GetExecutionCompletedTimestamp(), end} {
		if ts != nil {
			prev = max(prev, ts.AsTime().Sub(t0))
		}
		out = append(out, prev)
	}
	return out
}

// Stage is one interval of a finished operation's life, as the completion
// line and the status pages show it.
type Stage struct {
	Name string
	D    time.Duration
}

// Stages cuts a finished operation's life into the completion line's
// contiguous stages (see operationStages): accepted and resultAt on the
// server's clock (end, the moment its completion was reported, too), md
// from the worker. hasTotal is false when accepted is zero: then only the
// worker's stages are given.
func Stages(accepted, resultAt, end time.Time, md *repb.ExecutedActionMetadata) (stages []Stage, total time.Duration, hasTotal bool) {
	st, total, hasTotal := operationStages(stageTimes{Accepted: accepted, ResultAt: resultAt, End: end, Worker: md})
	for _, s := range st {
		stages = append(stages, Stage{Name: s.name, D: s.d})
	}
	return stages, total, hasTotal
}
