package execution

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gantry-build/gantry/internal/protocol"
)

// workerRun is a worker's metadata on its own clock: start at t0, then
// fetch, wait for a core, execute and upload for the given durations.
func workerRun(t0 time.Time, fetch, wait, exec, upload time.Duration) *repb.ExecutedActionMetadata {
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }
	return &repb.ExecutedActionMetadata{
		Worker:                         "w1",
		WorkerStartTimestamp:           ts(0),
		InputFetchStartTimestamp:       ts(time.Millisecond / 10),
		InputFetchCompletedTimestamp:   ts(fetch),
		ExecutionStartTimestamp:        ts(fetch + wait),
		ExecutionCompletedTimestamp:    ts(fetch + wait + exec),
		OutputUploadStartTimestamp:     ts(fetch + wait + exec + time.Millisecond/10),
		OutputUploadCompletedTimestamp: ts(fetch + wait + exec + upload - time.Microsecond),
		WorkerCompletedTimestamp:       ts(fetch + wait + exec + upload),
	}
}

func stageMap(t *testing.T, in stageTimes) (map[string]time.Duration, time.Duration) {
	t.Helper()
	stages, total, ok := operationStages(in)
	if !ok {
		t.Fatal("no total with Accepted set")
	}
	got := map[string]time.Duration{}
	var sum time.Duration
	var names []string
	for _, st := range stages {
		if st.d < 0 {
			t.Errorf("stage %s is negative: %v", st.name, st.d)
		}
		got[st.name] = st.d
		sum += st.d
		names = append(names, st.name)
	}
	if sum != total {
		t.Errorf("stages %v add up to %v, total is %v", stages, sum, total)
	}
	if want := "[queued input_fetch wait_core execute upload report]"; fmt.Sprint(names) != want {
		t.Errorf("stages %v, want %s", names, want)
	}
	return got, total
}

func TestOperationStagesAddUpAndAreNeverNegative(t *testing.T) {
	accepted := time.Date(2026, 11, 26, 10, 0, 0, 123_456_789, time.UTC) // not a whole microsecond
	const (
		queued = 5 * time.Second
		fetch  = 300 * time.Millisecond
		wait   = 2 * time.Second
		exec   = 4 * time.Second
		upload = 200 * time.Millisecond
		report = 50 * time.Millisecond
	)
	span := fetch + wait + exec + upload
	resultAt := accepted.Add(queued + span + 10*time.Millisecond)
	end := accepted.Add(queued + span + report)
	for _, c := range []struct {
		name string
		skew time.Duration // the worker's clock minus the server's
		// want: the worker's stages are exact; queued/report as given.
		queued, report time.Duration
	}{
		{"same clock", 0, queued, report},
		{"worker a little ahead", 5 * time.Millisecond, queued + 5*time.Millisecond, report - 5*time.Millisecond},
		// Ahead by more than the report took: report is what the server
		// saw after taking the result, queued the rest.
		{"worker far ahead", time.Hour, queued + 10*time.Millisecond, report - 10*time.Millisecond},
		// Behind by more than the queue time (the log line of issue 21
		// had queued_ms=-5053.94): queued is 0, report the rest.
		{"worker far behind", -(queued + 53940*time.Microsecond), 0, queued + report},
	} {
		t.Run(c.name, func(t *testing.T) {
			md := workerRun(accepted.Add(queued+c.skew), fetch, wait, exec, upload)
			got, total := stageMap(t, stageTimes{Accepted: accepted, ResultAt: resultAt, End: end, Worker: md})
			if want := (queued + span + report).Truncate(time.Microsecond); total != want {
				t.Errorf("total %v, want %v", total, want)
			}
			want := map[string]time.Duration{"queued": c.queued, "input_fetch": fetch, "wait_core": wait, "execute": exec, "upload": upload, "report": c.report}
			for name, w := range want {
				// Boundaries are whole microseconds: a stage may be off by one.
				if d := got[name] - w; d < -time.Microsecond || d > time.Microsecond {
					t.Errorf("%s = %v, want %v", name, got[name], w)
				}
			}
		})
	}
	// An operation that joined a task already executing (or restored
	// with a worker start before its acceptance): the worker's stages
	// before the operation was accepted are cut, none is negative.
	t.Run("joined a running task", func(t *testing.T) {
		joined := accepted.Add(queued + fetch + wait + time.Second) // a second into execution
		md := workerRun(accepted.Add(queued), fetch, wait, exec, upload)
		got, total := stageMap(t, stageTimes{Accepted: joined, ResultAt: resultAt, End: end, Worker: md})
		if got["queued"] != 0 || got["input_fetch"] != 0 || got["wait_core"] != 0 || got["upload"] != upload {
			t.Errorf("stages %v", got)
		}
		if got["execute"] > exec || total >= got["execute"]+upload+got["report"]+time.Microsecond {
			t.Errorf("stages %v, total %v", got, total)
		}
	})
	// Without worker timestamps (failed by the scheduler): queued until
	// the result, then report.
	t.Run("no worker", func(t *testing.T) {
		stages, total, _ := operationStages(stageTimes{Accepted: accepted, ResultAt: resultAt, End: end})
		if len(stages) != 2 || stages[0].name != "queued" || stages[1].name != "report" || stages[0].d+stages[1].d != total {
			t.Errorf("stages %v, total %v", stages, total)
		}
	})
}

// The completion line's duration group adds up to total_ms, in the
// logged milliseconds too, with a worker whose clock is behind.
func TestCompletionLineStagesAddUp(t *testing.T) {
	var buf bytes.Buffer
	s := &Service{log: slog.New(slog.NewJSONHandler(&buf, nil))}
	accepted := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	md := workerRun(accepted.Add(-7*time.Second), 3*time.Millisecond, time.Second, 2*time.Second, 5*time.Millisecond)
	resp := &repb.ExecuteResponse{Result: &repb.ActionResult{ExecutionMetadata: md}}
	end := accepted.Add(4 * time.Second)
	attrs := s.finishedAttrsAt(protocol.Finished{Name: "op", Accepted: accepted, ResultAt: end.Add(-time.Millisecond), Response: resp}, end)
	s.log.LogAttrs(t.Context(), slog.LevelInfo, "operation finished", attrs...)
	var line struct {
		Duration map[string]float64 `json:"duration"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, k := range []string{"queued_ms", "input_fetch_ms", "wait_core_ms", "execute_ms", "upload_ms", "report_ms"} {
		v, ok := line.Duration[k]
		if !ok || v < 0 {
			t.Errorf("%s = %v (present %v) in %s", k, v, ok, buf.Bytes())
		}
		sum += v
	}
	if total := line.Duration["total_ms"]; total != 4000 || sum < total-1e-6 || sum > total+1e-6 {
		t.Errorf("stages add up to %v, total_ms %v, want 4000: %s", sum, total, buf.Bytes())
	}
}
