package worker

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker/filecache"
	"github.com/gantry-build/gantry/internal/worker/runner"
)

// The stages tested directly, and the pipeline from an assignment to the
// scheduler's Complete, over an in-memory CAS, real processes and a fake
// scheduler that records what it is told.

// fakeScheduler records the results a worker reports.
type fakeScheduler struct {
	mu   sync.Mutex
	reqs []*workerpb.CompleteRequest
}

func (s *fakeScheduler) Complete(_ context.Context, req *workerpb.CompleteRequest, _ ...grpc.CallOption) (*workerpb.CompleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &workerpb.CompleteResponse{}
	if req.LeaseId != "" {
		s.reqs = append(s.reqs, req)
		resp.Accepted = true
	}
	for _, c := range req.Completions {
		s.reqs = append(s.reqs, c)
		resp.CompletionsAccepted = append(resp.CompletionsAccepted, true)
	}
	return resp, nil
}

func (s *fakeScheduler) completed() []*workerpb.CompleteRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*workerpb.CompleteRequest(nil), s.reqs...)
}

// oneCAS serves every instance from one store.
type oneCAS struct{ store blobstore.Store }

func (c oneCAS) For(string, digest.Function) blobstore.Store { return c.store }

const testSlots = 2

// stageWorker is a worker with real stages, as New assembles them, over
// an in-memory CAS and a fake scheduler; it does not poll.
func stageWorker(t *testing.T) (*Worker, *blobstore.Memory, *fakeScheduler) {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := blobstore.NewMemory(0)
	sched := &fakeScheduler{}
	cache, err := filecache.New(filepath.Join(dir, "cache"), 0, store)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := runner.NewSupervisor(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Close() })
	w := &Worker{
		cfg: Config{ID: "w1", Cores: testSlots}, log: log, cas: oneCAS{store}, cache: cache, sup: sup,
		roots: newRootPool(filepath.Join(dir, "roots"), log), logs: filepath.Join(dir, "logs"),
		fetch: semaphore.NewWeighted(testSlots), exec: semaphore.NewWeighted(testSlots), report: semaphore.NewWeighted(testSlots),
		kick: make(chan struct{}, 1), leases: map[string]*activeLease{}, running: map[string]chan struct{}{}, freeCPU: testSlots,
	}
	for _, d := range []string{w.roots.dir, w.logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w.inputs = newInputFetcher(cache, nil, wrapping{}, w.roots)
	w.executor = newExecutor(sup, nil, newWrapping(w.cfg, false, ""), w.logs, w, nil, nil)
	w.reporter = newReporter(0, false, nil, 0, log)
	w.completer = newCompleter(sched, w.cfg.ID, w, false, maxKeptPerCore*testSlots, log)
	return w, store, sched
}

// actionSpec is an action to assign.
type actionSpec struct {
	script  string            // run by /bin/sh -c
	args    []string          // the command line instead of the script's
	inputs  map[string]string // input root files
	absent  []string          // input files left out of the CAS
	outputs []string
	timeout time.Duration
	noCache bool // Action.do_not_cache
}

// put stores data in the CAS and returns its digest.
func put(t *testing.T, store blobstore.Store, data []byte) digest.Digest {
	t.Helper()
	d := digest.Compute(digest.SHA256, data)
	if err := blobstore.Put(context.Background(), store, d, data); err != nil {
		t.Fatal(err)
	}
	return d
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assignment uploads spec's input root and returns a cacheable
// assignment of it, as the scheduler hands it out.
func assignment(t *testing.T, store blobstore.Store, id string, spec actionSpec) *workerpb.Assignment {
	t.Helper()
	dir := &repb.Directory{}
	for name, content := range spec.inputs {
		d := put(t, store, []byte(content))
		dir.Files = append(dir.Files, &repb.FileNode{Name: name, Digest: d.Proto()})
	}
	for _, content := range spec.absent {
		d := digest.Compute(digest.SHA256, []byte(content))
		dir.Files = append(dir.Files, &repb.FileNode{Name: "absent-" + d.Hash[:8], Digest: d.Proto()})
	}
	// Directory entries are sorted by name (REAPI).
	for i := range dir.Files {
		for k := i + 1; k < len(dir.Files); k++ {
			if dir.Files[k].Name < dir.Files[i].Name {
				dir.Files[i], dir.Files[k] = dir.Files[k], dir.Files[i]
			}
		}
	}
	args := spec.args
	if args == nil {
		args = []string{"/bin/sh", "-c", spec.script}
	}
	cmd := &repb.Command{Arguments: args, OutputPaths: spec.outputs,
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/usr/bin:/bin"}}}
	cmdBytes := marshal(t, cmd)
	action := &repb.Action{CommandDigest: put(t, store, cmdBytes).Proto(), InputRootDigest: put(t, store, marshal(t, dir)).Proto(), DoNotCache: spec.noCache}
	if spec.timeout > 0 {
		action.Timeout = durationpb.New(spec.timeout)
	}
	actionBytes := marshal(t, action)
	ad := digest.Compute(digest.SHA256, actionBytes)
	return &workerpb.Assignment{LeaseId: id, TaskId: "task-" + id, ActionDigest: &workerpb.Digest{Hash: ad.Hash, SizeBytes: ad.Size, DigestFunction: int32(digest.SHA256)},
		Action: actionBytes, Command: cmdBytes, Cores: 1, Cacheable: true, Attempt: 1}
}

// lease registers a as the Match stage does, holding a fetch slot.
func lease(t *testing.T, w *Worker, a *workerpb.Assignment) (*activeLease, context.Context) {
	t.Helper()
	if !w.fetch.TryAcquire(1) {
		t.Fatal("no input fetch slot free")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l := &activeLease{id: a.LeaseId, taskID: a.TaskId, stage: workerpb.Stage_INPUT_FETCH, cancel: cancel}
	w.mu.Lock()
	w.leases[l.id] = l
	w.mu.Unlock()
	return l, ctx
}

// run takes a through the pipeline and returns what the scheduler was
// told about it.
func run(t *testing.T, w *Worker, sched *fakeScheduler, a *workerpb.Assignment) []*workerpb.CompleteRequest {
	t.Helper()
	before := len(sched.completed())
	l, ctx := lease(t, w, a)
	w.runStages(ctx, l, a)
	return sched.completed()[before:]
}

// job is a parsed job of a, for calling stages directly.
func newJob(t *testing.T, w *Worker, store blobstore.Store, a *workerpb.Assignment) *job {
	t.Helper()
	l := &activeLease{id: a.LeaseId, taskID: a.TaskId}
	j := &job{lease: l, a: a, cas: store, md: &repb.ExecutedActionMetadata{}}
	if err := j.parse(); err != nil {
		t.Fatal(err)
	}
	return j
}

// checkReleased fails unless the worker holds nothing for any lease: every
// slot of every stage free, no lease or task left, its cores all free.
func checkReleased(t *testing.T, w *Worker) {
	t.Helper()
	for name, s := range map[string]*semaphore.Weighted{"input fetch": w.fetch, "execute": w.exec, "report": w.report} {
		if !s.TryAcquire(testSlots) {
			t.Errorf("a lease left a %s slot held", name)
			continue
		}
		s.Release(testSlots)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.leases) != 0 || len(w.running) != 0 || w.freeCPU != testSlots {
		t.Errorf("after the lease: %d leases, %d tasks running, %d of %d cores free", len(w.leases), len(w.running), w.freeCPU, testSlots)
	}
}

func blob(t *testing.T, store blobstore.Store, d *repb.Digest) string {
	t.Helper()
	pd, err := digest.FromProto(digest.SHA256, d)
	if err != nil {
		t.Fatal(err)
	}
	b, err := blobstore.Get(context.Background(), store, pd)
	if err != nil {
		t.Fatalf("blob %s: %v", pd, err)
	}
	return string(b)
}

func result(t *testing.T, req *workerpb.CompleteRequest) *repb.ActionResult {
	t.Helper()
	ar := &repb.ActionResult{}
	if req.ActionResult == nil {
		t.Fatalf("no ActionResult in %v", req)
	}
	if err := proto.Unmarshal(req.ActionResult, ar); err != nil {
		t.Fatal(err)
	}
	return ar
}
