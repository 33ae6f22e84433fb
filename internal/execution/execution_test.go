package execution

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
)

type env struct {
	t     *testing.T
	cas   *blobstore.Memory
	ac    actioncache.Store
	sched *scheduler.Scheduler
	svc   *Service
	conn  *grpc.ClientConn
	exec  repb.ExecutionClient
	ops   longrunningpb.OperationsClient
	wk    workerpb.WorkersClient
	ws    *WorkerService
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, nil)
}

// newEnvWith is newEnv with the Service's ActionCache lookup passed
// through wrap (nil: as it is).
func newEnvWith(t *testing.T, wrap func(ResultLookup) ResultLookup) *env {
	t.Helper()
	return newEnvChroot(t, wrap, nil)
}

// newEnvChroot is newEnvWith with chroot the instances whose actions run
// with the input root as "/" (scheduler.chroot_instances).
func newEnvChroot(t *testing.T, wrap func(ResultLookup) ResultLookup, chroot []string) *env {
	t.Helper()
	return newEnvCAS(t, wrap, chroot, nil)
}

// newEnvCAS is newEnvChroot with the CAS the Service reads actions from
// passed through wrapCAS (nil: as it is).
func newEnvCAS(t *testing.T, wrap func(ResultLookup) ResultLookup, chroot []string, wrapCAS func(blobstore.Store) blobstore.Store) *env {
	t.Helper()
	return newEnvStore(t, wrap, chroot, wrapCAS, nil)
}

// newEnvStore is newEnvCAS with the scheduler's state in store (nil:
// none).
func newEnvStore(t *testing.T, wrap func(ResultLookup) ResultLookup, chroot []string, wrapCAS func(blobstore.Store) blobstore.Store, store statestore.Store) *env {
	t.Helper()
	cas := blobstore.NewMemory(0)
	ac := actioncache.NewMemory(0)
	fe := frontend.New(cas, ac, frontend.Options{CompletenessCheck: true, ExecEnabled: true, ChrootInstances: chroot})
	sched := scheduler.New(scheduler.Config{HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 2 * time.Second, ChrootInstances: chroot}, nil, ResultStore(fe.StoreActionResult))
	g := grpc.NewServer(frontend.ServerCodec())
	fe.Register(g)
	lookup := ResultLookup(fe.LookupActionResult)
	if wrap != nil {
		lookup = wrap(lookup)
	}
	var svcCAS blobstore.Store = cas
	if wrapCAS != nil {
		svcCAS = wrapCAS(cas)
	}
	svc := New(sched, svcCAS, lookup, Unobserved{}, nil)
	svc.Register(g)
	ws := NewWorkerService(sched, Unobserved{})
	ws.MaxPollWait = 2 * time.Second
	ws.Attach(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	ctx, cancel := context.WithCancel(context.Background())
	if store != nil {
		if err := sched.Attach(ctx, store); err != nil {
			t.Fatal(err)
		}
	}
	go sched.Run(ctx, 20*time.Millisecond)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cancel(); g.Stop() })
	return &env{t: t, cas: cas, ac: ac, sched: sched, svc: svc, conn: conn, ws: ws,
		exec: repb.NewExecutionClient(conn), ops: longrunningpb.NewOperationsClient(conn), wk: workerpb.NewWorkersClient(conn)}
}

func (e *env) put(m proto.Message) digest.Digest {
	e.t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.putBytes(b)
}

func (e *env) putBytes(b []byte) digest.Digest {
	e.t.Helper()
	d := digest.Compute(digest.SHA256, b)
	if err := blobstore.Put(context.Background(), e.cas, d, b); err != nil {
		e.t.Fatal(err)
	}
	return d
}

// action stores a Command and Action over the given input root.
func (e *env) action(root digest.Digest, cmd *repb.Command, mod ...func(*repb.Action)) digest.Digest {
	e.t.Helper()
	a := &repb.Action{CommandDigest: e.put(cmd).Proto(), InputRootDigest: root.Proto()}
	for _, m := range mod {
		m(a)
	}
	return e.put(a)
}

func simpleCmd(args ...string) *repb.Command {
	return &repb.Command{Arguments: args, OutputFiles: []string{"out"},
		Platform: &repb.Platform{Properties: []*repb.Platform_Property{{Name: "OSFamily", Value: "linux"}}}}
}

func emptyRoot() digest.Digest { return digest.Empty(digest.SHA256) }

// execute calls Execute and collects every Operation until the stream ends.
func (e *env) execute(ctx context.Context, req *repb.ExecuteRequest) ([]*longrunningpb.Operation, error) {
	stream, err := e.exec.Execute(ctx, req)
	if err != nil {
		return nil, err
	}
	var ops []*longrunningpb.Operation
	for {
		op, err := stream.Recv()
		if err == io.EOF {
			return ops, nil
		}
		if err != nil {
			return ops, err
		}
		ops = append(ops, op)
	}
}

func stageOf(t *testing.T, op *longrunningpb.Operation) repb.ExecutionStage_Value {
	t.Helper()
	md := &repb.ExecuteOperationMetadata{}
	if err := op.Metadata.UnmarshalTo(md); err != nil {
		t.Fatal(err)
	}
	return md.Stage
}

func responseOf(t *testing.T, op *longrunningpb.Operation) *repb.ExecuteResponse {
	t.Helper()
	if !op.Done {
		t.Fatalf("operation %s not done", op.Name)
	}
	if op.GetError() != nil {
		t.Fatalf("operation error set: %v (execution errors belong in ExecuteResponse.status)", op.GetError())
	}
	resp := &repb.ExecuteResponse{}
	if err := op.GetResponse().UnmarshalTo(resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// worker is a hand-driven worker for tests.
type worker struct {
	e  *env
	id string
}

func (e *env) worker(id string) *worker {
	e.t.Helper()
	_, err := e.wk.Register(context.Background(), &workerpb.RegisterRequest{WorkerId: id, Cores: 2, AcceptUnknownProperties: true,
		Properties: []*workerpb.Property{{Name: "OSFamily", Value: "linux"}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return &worker{e: e, id: id}
}

func (w *worker) poll() *workerpb.Assignment {
	w.e.t.Helper()
	resp, err := w.e.wk.Poll(context.Background(), &workerpb.PollRequest{WorkerId: w.id, FreeCores: 2, WaitMs: 2000})
	if err != nil {
		w.e.t.Fatal(err)
	}
	return resp.Assignment
}

func (w *worker) stage(a *workerpb.Assignment, st workerpb.Stage) *workerpb.HeartbeatResponse {
	resp, err := w.e.wk.Heartbeat(context.Background(), &workerpb.HeartbeatRequest{WorkerId: w.id, Leases: []*workerpb.LeaseState{{LeaseId: a.LeaseId, Stage: st}}})
	if err != nil {
		w.e.t.Fatal(err)
	}
	return resp
}

func (w *worker) complete(a *workerpb.Assignment, ar *repb.ActionResult, code codes.Code, msg string) bool {
	b, _ := proto.Marshal(ar)
	resp, err := w.e.wk.Complete(context.Background(), &workerpb.CompleteRequest{WorkerId: w.id, LeaseId: a.LeaseId, ActionResult: b, StatusCode: int32(code), StatusMessage: msg})
	if err != nil {
		w.e.t.Fatal(err)
	}
	return resp.Accepted
}

func violations(t *testing.T, err error) []string {
	t.Helper()
	var subjects []string
	for _, d := range status.Convert(err).Details() {
		if pf, ok := d.(*errdetails.PreconditionFailure); ok {
			for _, v := range pf.Violations {
				if v.Type != "MISSING" {
					t.Errorf("violation type %q, want MISSING", v.Type)
				}
				subjects = append(subjects, v.Subject)
			}
		}
	}
	return subjects
}

func TestExecuteStagesAndResult(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	ad := e.action(emptyRoot(), simpleCmd("/bin/true"))
	ctx := context.Background()
	stream, err := e.exec.Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	recvStage := func(want repb.ExecutionStage_Value) *longrunningpb.Operation {
		t.Helper()
		op, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got := stageOf(t, op); got != want {
			t.Fatalf("stage %v, want %v", got, want)
		}
		return op
	}
	first := recvStage(repb.ExecutionStage_CACHE_CHECK)
	recvStage(repb.ExecutionStage_QUEUED)
	a := w.poll()
	if a == nil || a.ActionDigest.Hash != ad.Hash || !a.Cacheable {
		t.Fatalf("assignment %+v", a)
	}
	w.stage(a, workerpb.Stage_EXECUTING)
	recvStage(repb.ExecutionStage_EXECUTING)
	if !w.complete(a, &repb.ActionResult{ExitCode: 3}, codes.OK, "") {
		t.Fatal("completion refused")
	}
	last := recvStage(repb.ExecutionStage_COMPLETED)
	if last.Name != first.Name {
		t.Errorf("operation name changed from %s to %s", first.Name, last.Name)
	}
	resp := responseOf(t, last)
	if resp.Result.GetExitCode() != 3 || resp.CachedResult || resp.Status.GetCode() != 0 {
		t.Fatalf("response %+v", resp)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("stream should end after completion: %v", err)
	}
}

func TestExecutionErrorGoesInResponseStatus(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	ad := e.action(emptyRoot(), simpleCmd("sleep", "100"), func(a *repb.Action) { a.Timeout = durationpb.New(time.Second) })
	done := make(chan []*longrunningpb.Operation)
	go func() {
		ops, err := e.execute(context.Background(), &repb.ExecuteRequest{ActionDigest: ad.Proto()})
		if err != nil {
			t.Error(err)
		}
		done <- ops
	}()
	a := w.poll()
	w.complete(a, &repb.ActionResult{ExitCode: -1}, codes.DeadlineExceeded, "timed out")
	ops := <-done
	resp := responseOf(t, ops[len(ops)-1])
	if codes.Code(resp.Status.Code) != codes.DeadlineExceeded {
		t.Fatalf("status %v, want DEADLINE_EXCEEDED", resp.Status)
	}
}

func TestCacheHitAndSkipCacheLookup(t *testing.T) {
	e := newEnv(t)
	ad := e.action(emptyRoot(), simpleCmd("/bin/true"))
	out := e.putBytes([]byte("output"))
	if err := e.ac.Put(context.Background(), "", ad, &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "out", Digest: out.Proto()}}}); err != nil {
		t.Fatal(err)
	}
	ops, err := e.execute(context.Background(), &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	resp := responseOf(t, ops[len(ops)-1])
	if !resp.CachedResult || len(resp.Result.OutputFiles) != 1 {
		t.Fatalf("want a cached result, got %+v", resp)
	}
	// Another instance does not see the entry; skip_cache_lookup runs anyway.
	for _, req := range []*repb.ExecuteRequest{
		{InstanceName: "other", ActionDigest: ad.Proto()},
		{ActionDigest: ad.Proto(), SkipCacheLookup: true},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		ops, _ := e.execute(ctx, req)
		cancel()
		if len(ops) == 0 || ops[len(ops)-1].Done {
			t.Fatalf("request %v should have been queued, got %v", req, ops)
		}
	}
}

func TestMissingBlobsArePreconditionFailures(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// Missing action.
	ghost := digest.Compute(digest.SHA256, []byte("ghost action"))
	_, err := e.execute(ctx, &repb.ExecuteRequest{ActionDigest: ghost.Proto()})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("missing action: %v", err)
	}
	if v := violations(t, err); len(v) != 1 || v[0] != "blobs/"+ghost.Hash+"/"+"12" {
		t.Fatalf("violations %v", v)
	}
	// Missing input files, a missing subdirectory and a missing command.
	f1 := digest.Compute(digest.SHA256, []byte("one"))
	f2 := digest.Compute(digest.SHA256, []byte("two"))
	sub := digest.Compute(digest.SHA256, []byte("not a dir"))
	root := e.put(&repb.Directory{
		Files:       []*repb.FileNode{{Name: "a", Digest: f1.Proto()}, {Name: "b", Digest: f2.Proto()}},
		Directories: []*repb.DirectoryNode{{Name: "d", Digest: sub.Proto()}},
	})
	ad := e.action(root, simpleCmd("/bin/true"))
	_, err = e.execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	got := strings.Join(violations(t, err), " ")
	for _, d := range []digest.Digest{f1, f2, sub} {
		if !strings.Contains(got, "blobs/"+d.ResourceSegment()) {
			t.Errorf("violations %q lack %s", got, d)
		}
	}
	cmdMissing := e.put(&repb.Action{CommandDigest: f1.Proto(), InputRootDigest: emptyRoot().Proto()})
	_, err = e.execute(ctx, &repb.ExecuteRequest{ActionDigest: cmdMissing.Proto()})
	if v := violations(t, err); len(v) != 1 || !strings.Contains(v[0], f1.Hash) {
		t.Fatalf("missing command violations %v (%v)", v, err)
	}
}

func TestBadRequestsAreInvalidArgument(t *testing.T) {
	e := newEnv(t)
	file := e.putBytes([]byte("x"))
	fn := func(name string) *repb.FileNode { return &repb.FileNode{Name: name, Digest: file.Proto()} }
	cases := map[string]digest.Digest{
		"unsorted files":   e.action(e.put(&repb.Directory{Files: []*repb.FileNode{fn("b"), fn("a")}}), simpleCmd("true")),
		"dotdot name":      e.action(e.put(&repb.Directory{Files: []*repb.FileNode{fn("..")}}), simpleCmd("true")),
		"slash in name":    e.action(e.put(&repb.Directory{Files: []*repb.FileNode{fn("a/b")}}), simpleCmd("true")),
		"empty name":       e.action(e.put(&repb.Directory{Files: []*repb.FileNode{fn("")}}), simpleCmd("true")),
		"duplicate names":  e.action(e.put(&repb.Directory{Files: []*repb.FileNode{fn("a")}, Directories: []*repb.DirectoryNode{{Name: "a", Digest: emptyRoot().Proto()}}}), simpleCmd("true")),
		"escaping symlink": e.action(e.put(&repb.Directory{Symlinks: []*repb.SymlinkNode{{Name: "l", Target: "../../etc/passwd"}}}), simpleCmd("true")),
		"absolute symlink": e.action(e.put(&repb.Directory{Symlinks: []*repb.SymlinkNode{{Name: "l", Target: "/etc/passwd"}}}), simpleCmd("true")),
		"empty arguments":  e.action(emptyRoot(), &repb.Command{}),
		"absolute output":  e.action(emptyRoot(), &repb.Command{Arguments: []string{"true"}, OutputFiles: []string{"/tmp/x"}}),
		"escaping output":  e.action(emptyRoot(), &repb.Command{Arguments: []string{"true"}, OutputPaths: []string{"a/../../x"}}),
		"unsorted env":     e.action(emptyRoot(), &repb.Command{Arguments: []string{"true"}, EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "B"}, {Name: "A"}}}),
		"bad min-cores": e.action(emptyRoot(), &repb.Command{Arguments: []string{"true"},
			Platform: &repb.Platform{Properties: []*repb.Platform_Property{{Name: "min-cores", Value: "many"}}}}),
	}
	for name, ad := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := e.execute(context.Background(), &repb.ExecuteRequest{ActionDigest: ad.Proto()})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want INVALID_ARGUMENT", err)
			}
		})
	}
	_, err := e.execute(context.Background(), &repb.ExecuteRequest{InstanceName: "a/blobs", ActionDigest: file.Proto()})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("reserved instance name: %v", err)
	}
	_, err = e.execute(context.Background(), &repb.ExecuteRequest{ActionDigest: &repb.Digest{Hash: "xyz", SizeBytes: 1}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad digest: %v", err)
	}
	// executeDigest's other checks: a missing digest, an unknown digest
	// function.
	_, err = e.execute(context.Background(), &repb.ExecuteRequest{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "action_digest is missing") {
		t.Fatalf("no action digest: %v", err)
	}
	_, err = e.execute(context.Background(), &repb.ExecuteRequest{ActionDigest: file.Proto(), DigestFunction: repb.DigestFunction_Value(99)})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown digest function: %v", err)
	}
	// A symlink going up but staying inside the root is fine.
	inner := e.put(&repb.Directory{Symlinks: []*repb.SymlinkNode{{Name: "l", Target: "../x"}}})
	ok := e.action(e.put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "sub", Digest: inner.Proto()}}}), simpleCmd("true"))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	ops, err := e.execute(ctx, &repb.ExecuteRequest{ActionDigest: ok.Proto()})
	if len(ops) < 2 || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("valid tree not queued: %v %v", ops, err)
	}
}

func TestDeduplicatedExecutions(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	ad := e.action(emptyRoot(), simpleCmd("/bin/true"))
	results := make(chan *longrunningpb.Operation, 3)
	for range 3 {
		go func() {
			ops, err := e.execute(context.Background(), &repb.ExecuteRequest{ActionDigest: ad.Proto()})
			if err != nil || len(ops) == 0 {
				t.Error(err)
				results <- nil
				return
			}
			results <- ops[len(ops)-1]
		}()
	}
	// Wait until all three are submitted, then run the one execution.
	for e.sched.Stats().Operations < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	a := w.poll()
	w.complete(a, &repb.ActionResult{ExitCode: 0}, codes.OK, "")
	names := map[string]bool{}
	for range 3 {
		op := <-results
		if op == nil {
			t.FailNow()
		}
		responseOf(t, op)
		names[op.Name] = true
	}
	if len(names) != 3 {
		t.Errorf("callers share operation names: %v", names)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if r, _ := e.wk.Poll(ctx, &workerpb.PollRequest{WorkerId: "w1", FreeCores: 1, WaitMs: 50}); r.GetAssignment() != nil {
		t.Fatal("a deduplicated action ran twice")
	}
}

func TestWaitExecutionAndOperations(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	// Unknown names are NOT_FOUND, so clients re-Execute.
	ws, err := e.exec.WaitExecution(ctx, &repb.WaitExecutionRequest{Name: "no-such-op"})
	if err == nil {
		_, err = ws.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Fatalf("WaitExecution unknown: %v", err)
	}
	if _, err := e.ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetOperation unknown: %v", err)
	}

	ad := e.action(emptyRoot(), simpleCmd("/bin/true"))
	sctx, cancel := context.WithCancel(ctx)
	stream, _ := e.exec.Execute(sctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	stream.Recv() // QUEUED
	cancel()      // the client's stream breaks; it resumes with WaitExecution
	ws, err = e.exec.WaitExecution(ctx, &repb.WaitExecutionRequest{Name: first.Name})
	if err != nil {
		t.Fatal(err)
	}
	if op, err := ws.Recv(); err != nil || op.Name != first.Name || op.Done {
		t.Fatalf("WaitExecution first message %v %v", op, err)
	}
	got, err := e.ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: first.Name})
	if err != nil || got.Done {
		t.Fatalf("GetOperation %v %v", got, err)
	}
	list, err := e.ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{})
	if err != nil || len(list.Operations) != 1 || list.Operations[0].Name != first.Name {
		t.Fatalf("ListOperations %v %v", list, err)
	}
	a := w.poll()
	w.complete(a, &repb.ActionResult{}, codes.OK, "")
	var last *longrunningpb.Operation
	for {
		op, err := ws.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = op
	}
	responseOf(t, last)
	wop, err := e.ops.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{Name: first.Name, Timeout: durationpb.New(time.Second)})
	if err != nil || !wop.Done {
		t.Fatalf("WaitOperation %v %v", wop, err)
	}
}

func TestCancelOperation(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	ad := e.action(emptyRoot(), simpleCmd("sleep", "100"))
	stream, _ := e.exec.Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	first, _ := stream.Recv()
	a := w.poll()
	w.stage(a, workerpb.Stage_EXECUTING)
	if _, err := e.ops.CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: first.Name}); err != nil {
		t.Fatal(err)
	}
	var last *longrunningpb.Operation
	for {
		op, err := stream.Recv()
		if err != nil {
			break
		}
		last = op
	}
	if resp := responseOf(t, last); codes.Code(resp.Status.Code) != codes.Canceled {
		t.Fatalf("status %v, want CANCELLED", resp.Status)
	}
	hb := w.stage(a, workerpb.Stage_EXECUTING)
	if len(hb.Commands) != 1 || hb.Commands[0].Command != workerpb.Command_CANCEL {
		t.Fatalf("worker not told to stop: %v", hb.Commands)
	}
	if w.complete(a, &repb.ActionResult{}, codes.OK, "") {
		t.Fatal("result of a cancelled lease accepted")
	}
}

func TestCompleteWritesActionCacheOnlyForValidLeases(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	ctx := context.Background()
	run := func(ad digest.Digest) (*workerpb.Assignment, chan struct{}) {
		done := make(chan struct{})
		go func() { e.execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()}); close(done) }()
		return w.poll(), done
	}
	complete := func(a *workerpb.Assignment, lease string, exit int32) bool {
		b, _ := proto.Marshal(&repb.ActionResult{ExitCode: exit})
		resp, err := e.wk.Complete(ctx, &workerpb.CompleteRequest{WorkerId: "w1", LeaseId: lease, ActionResult: b, UpdateActionCache: true})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Accepted
	}
	cached := func(ad digest.Digest) bool {
		_, err := e.ac.Get(ctx, "", ad)
		return err == nil
	}
	good := e.action(emptyRoot(), simpleCmd("true"))
	a, done := run(good)
	if complete(a, "not-"+a.LeaseId, 0) {
		t.Fatal("completion with a wrong lease accepted")
	}
	if cached(good) {
		t.Fatal("a result from an invalid lease was cached")
	}
	if !complete(a, a.LeaseId, 0) {
		t.Fatal("valid completion refused")
	}
	<-done
	if !cached(good) {
		t.Fatal("successful result not cached")
	}
	failing := e.action(emptyRoot(), simpleCmd("false"))
	a, done = run(failing)
	complete(a, a.LeaseId, 1)
	<-done
	if cached(failing) {
		t.Fatal("a non-zero exit code was cached")
	}
}
