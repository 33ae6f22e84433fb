package worker

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestReportUploadsOutputsAndStampsMetadata: a successful action's
// outputs, stdout and stderr are in the CAS, its result says where, and
// its ExecutedActionMetadata has every worker timestamp, in stage order.
func TestReportUploadsOutputsAndStampsMetadata(t *testing.T) {
	w, store, sched := stageWorker(t)
	a := assignment(t, store, "l1", actionSpec{
		script:  "mkdir -p out && cat in.txt > out/copy.txt && echo to-stdout && echo to-stderr >&2",
		inputs:  map[string]string{"in.txt": "payload"},
		outputs: []string{"out/copy.txt"},
	})
	reqs := run(t, w, sched, a)
	if len(reqs) != 1 {
		t.Fatalf("the scheduler was told %d times, want once", len(reqs))
	}
	if reqs[0].StatusCode != 0 || !reqs[0].UpdateActionCache {
		t.Fatalf("reported %v, want OK and an ActionCache update", reqs[0])
	}
	ar := result(t, reqs[0])
	if len(ar.OutputFiles) != 1 || ar.OutputFiles[0].Path != "out/copy.txt" || blob(t, store, ar.OutputFiles[0].Digest) != "payload" {
		t.Errorf("output files %v", ar.OutputFiles)
	}
	if got := blob(t, store, ar.StdoutDigest); got != "to-stdout\n" {
		t.Errorf("stdout %q", got)
	}
	if got := blob(t, store, ar.StderrDigest); got != "to-stderr\n" {
		t.Errorf("stderr %q", got)
	}
	md := ar.ExecutionMetadata
	if md.GetWorker() != "w1" {
		t.Errorf("metadata names worker %q", md.GetWorker())
	}
	stamps := []struct {
		name string
		ts   *timestamppb.Timestamp
	}{
		{"worker_start", md.GetWorkerStartTimestamp()},
		{"input_fetch_start", md.GetInputFetchStartTimestamp()},
		{"input_fetch_completed", md.GetInputFetchCompletedTimestamp()},
		{"execution_start", md.GetExecutionStartTimestamp()},
		{"execution_completed", md.GetExecutionCompletedTimestamp()},
		{"output_upload_start", md.GetOutputUploadStartTimestamp()},
		{"output_upload_completed", md.GetOutputUploadCompletedTimestamp()},
		{"worker_completed", md.GetWorkerCompletedTimestamp()},
	}
	for i, s := range stamps {
		if s.ts == nil {
			t.Errorf("%s_timestamp is not set", s.name)
			continue
		}
		if i > 0 && stamps[i-1].ts != nil && s.ts.AsTime().Before(stamps[i-1].ts.AsTime()) {
			t.Errorf("%s (%v) is before %s (%v)", s.name, s.ts.AsTime(), stamps[i-1].name, stamps[i-1].ts.AsTime())
		}
	}
	checkReleased(t, w)
}

// TestActionCacheDecision: the worker asks for an ActionCache update only
// for an action that exited 0, that the scheduler says may be cached and
// that does not say do_not_cache; a failing action is still a result.
func TestActionCacheDecision(t *testing.T) {
	w, store, sched := stageWorker(t)
	for _, c := range []struct {
		name      string
		spec      actionSpec
		cacheable bool
		exit      int32
		want      bool
	}{
		{"exit 0", actionSpec{script: "exit 0"}, true, 0, true},
		{"exit 3", actionSpec{script: "exit 3"}, true, 3, false},
		{"do_not_cache", actionSpec{script: "exit 0", noCache: true}, true, 0, false},
		{"not cacheable", actionSpec{script: "exit 0"}, false, 0, false},
	} {
		a := assignment(t, store, c.name, c.spec)
		a.Cacheable = c.cacheable
		reqs := run(t, w, sched, a)
		if len(reqs) != 1 {
			t.Fatalf("%s: the scheduler was told %d times", c.name, len(reqs))
		}
		if codes.Code(reqs[0].StatusCode) != codes.OK || reqs[0].UpdateActionCache != c.want {
			t.Errorf("%s: status %d, update_action_cache %v, want OK, %v", c.name, reqs[0].StatusCode, reqs[0].UpdateActionCache, c.want)
		}
		if ar := result(t, reqs[0]); ar.ExitCode != c.exit {
			t.Errorf("%s: exit code %d", c.name, ar.ExitCode)
		}
	}
	checkReleased(t, w)
}
