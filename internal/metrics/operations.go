package metrics

import (
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// Results of an operation (the result label of gantry_operations_total).
const (
	ResultCacheHit    = "cache_hit"    // served from the action cache
	ResultSuccess     = "success"      // ran, exit code 0
	ResultNonZeroExit = "nonzero_exit" // ran, non-zero exit code
	ResultError       = "error"        // failed: status not OK
)

// StageBuckets are the bounds, in seconds, of the stage histograms.
var StageBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// Operations counts what Execute does: outcomes and cache lookups
// (Outcomes, where callers see operations finish), and the time actions
// spend in each stage (Timings, where the scheduler runs). The
// all-in-one server has both; a frontend node only the outcomes, a
// scheduler node only the timings.
type Operations struct {
	*Outcomes
	*Timings
}

// NewOperations registers every operation metric with reg.
func NewOperations(reg prometheus.Registerer) *Operations {
	return &Operations{Outcomes: NewOutcomes(reg), Timings: NewTimings(reg)}
}

// OperationDone counts a finished operation and observes its queue time;
// accepted is when Execute took it (zero for cache hits and unknown).
func (m *Operations) OperationDone(resp *repb.ExecuteResponse, accepted time.Time) {
	m.Outcomes.OperationDone(resp)
	m.Timings.Queued(resp, accepted)
}

// Outcomes counts finished operations by result, and action cache
// lookups.
type Outcomes struct {
	ops     *prometheus.CounterVec
	lookups *prometheus.CounterVec
}

// NewOutcomes registers gantry_operations_total and
// gantry_action_cache_lookups_total with reg.
func NewOutcomes(reg prometheus.Registerer) *Outcomes {
	m := &Outcomes{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_operations_total",
			Help: "Finished Execute operations, by result (cache_hit, success, nonzero_exit, error) and gRPC status code.",
		}, []string{"result", "code"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_action_cache_lookups_total",
			Help: "Action cache lookups by source (execute: Execute's own lookup; get_action_result: clients' GetActionResult) and result (hit, miss).",
		}, []string{"source", "result"}),
	}
	for _, r := range []string{"hit", "miss"} {
		for _, s := range []string{"execute", "get_action_result"} {
			m.lookups.WithLabelValues(s, r)
		}
	}
	reg.MustRegister(m.ops, m.lookups)
	return m
}

// Result classifies a finished operation's response.
func Result(resp *repb.ExecuteResponse) string {
	switch {
	case resp.GetStatus().GetCode() != int32(codes.OK):
		return ResultError
	case resp.GetCachedResult():
		return ResultCacheHit
	case resp.GetResult().GetExitCode() != 0:
		return ResultNonZeroExit
	default:
		return ResultSuccess
	}
}

// OperationDone counts a finished operation.
func (m *Outcomes) OperationDone(resp *repb.ExecuteResponse) {
	m.ops.WithLabelValues(Result(resp), codes.Code(resp.GetStatus().GetCode()).String()).Inc()
}

// CacheLookup counts one action cache lookup.
func (m *Outcomes) CacheLookup(source string, hit bool) {
	r := "miss"
	if hit {
		r = "hit"
	}
	m.lookups.WithLabelValues(source, r).Inc()
}

// Timings observes how long actions wait for a worker and how long
// workers spend on them.
type Timings struct {
	queueTime prometheus.Histogram
	stages    *prometheus.HistogramVec
	// stage histograms resolved once: no label lookup per observation.
	fetch, exec, upload, worker prometheus.Observer
}

// NewTimings registers gantry_operation_queue_time_seconds and
// gantry_worker_stage_duration_seconds with reg.
func NewTimings(reg prometheus.Registerer) *Timings {
	m := &Timings{
		queueTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gantry_operation_queue_time_seconds",
			Help:    "Time from Execute accepting an action to a worker starting on it (all attempts).",
			Buckets: StageBuckets,
		}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gantry_worker_stage_duration_seconds",
			Help:    "Time workers spend per action in each stage (input_fetch, execute, output_upload, and worker: all of it), from the results' ExecutedActionMetadata.",
			Buckets: StageBuckets,
		}, []string{"stage"}),
	}
	m.fetch, m.exec = m.stages.WithLabelValues("input_fetch"), m.stages.WithLabelValues("execute")
	m.upload, m.worker = m.stages.WithLabelValues("output_upload"), m.stages.WithLabelValues("worker")
	reg.MustRegister(m.queueTime, m.stages)
	return m
}

// Queued observes a finished operation's queue time: from accepted (when
// Execute took it; zero for cache hits and unknown) to its worker's start.
func (m *Timings) Queued(resp *repb.ExecuteResponse, accepted time.Time) {
	md := resp.GetResult().GetExecutionMetadata()
	if !accepted.IsZero() && md.GetWorkerStartTimestamp() != nil {
		if d := md.WorkerStartTimestamp.AsTime().Sub(accepted); d >= 0 {
			m.queueTime.Observe(d.Seconds())
		}
	}
}

// WorkerCompleted observes the stage durations a worker reported.
func (m *Timings) WorkerCompleted(md *repb.ExecutedActionMetadata) {
	if md == nil {
		return
	}
	observe := func(o prometheus.Observer, start, end interface{ AsTime() time.Time }, ok bool) {
		if !ok {
			return
		}
		if d := end.AsTime().Sub(start.AsTime()); d >= 0 {
			o.Observe(d.Seconds())
		}
	}
	observe(m.fetch, md.InputFetchStartTimestamp, md.InputFetchCompletedTimestamp, md.InputFetchStartTimestamp != nil && md.InputFetchCompletedTimestamp != nil)
	observe(m.exec, md.ExecutionStartTimestamp, md.ExecutionCompletedTimestamp, md.ExecutionStartTimestamp != nil && md.ExecutionCompletedTimestamp != nil)
	observe(m.upload, md.OutputUploadStartTimestamp, md.OutputUploadCompletedTimestamp, md.OutputUploadStartTimestamp != nil && md.OutputUploadCompletedTimestamp != nil)
	observe(m.worker, md.WorkerStartTimestamp, md.WorkerCompletedTimestamp, md.WorkerStartTimestamp != nil && md.WorkerCompletedTimestamp != nil)
}
