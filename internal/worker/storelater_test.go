package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	schedsvc "github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
)

// A real scheduler (frontend, scheduler, worker protocol) on loopback,
// over a state store whose commits a test holds, and that it can kill:
// after crash nothing more is stored, as when the process dies.

// crashStore holds every Apply while held; after crash the held ones and
// every later one fail without being stored.
type crashStore struct {
	statestore.Store
	mu      sync.Mutex
	gate    chan struct{}
	crashed bool
}

func (c *crashStore) hold() {
	c.mu.Lock()
	c.gate = make(chan struct{})
	c.mu.Unlock()
}

func (c *crashStore) release() {
	c.mu.Lock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
	}
	c.mu.Unlock()
}

func (c *crashStore) crash() {
	c.mu.Lock()
	c.crashed = true
	c.mu.Unlock()
	c.release()
}

func (c *crashStore) Apply(ctx context.Context, b []statestore.Mutation) error {
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	c.mu.Lock()
	crashed := c.crashed
	c.mu.Unlock()
	if crashed {
		return errors.New("the scheduler process is gone")
	}
	return c.Store.Apply(ctx, b)
}

// liveScheduler is one scheduler process: it serves on addr until stop.
type liveScheduler struct {
	sched *scheduler.Scheduler
	addr  string
	stop  func()
}

// serveScheduler starts a scheduler on addr ("127.0.0.1:0": any port)
// over the CAS, ActionCache and state store that outlive it.
func serveScheduler(t *testing.T, addr string, cas blobstore.Store, ac actioncache.Store, store statestore.Store) *liveScheduler {
	t.Helper()
	fe := frontend.New(cas, ac, frontend.Options{CompletenessCheck: true, ExecEnabled: true})
	sched := scheduler.New(scheduler.Config{HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 5 * time.Second, ReconcileWindow: 2 * time.Second}, nil, schedsvc.ResultStore(fe.StoreActionResult))
	g := grpc.NewServer(frontend.ServerCodec())
	fe.Register(g)
	schedsvc.New(sched, cas, schedsvc.ResultLookup(fe.LookupActionResult), schedsvc.Unobserved{}, nil).Register(g)
	ws := schedsvc.NewWorkerService(sched, schedsvc.Unobserved{})
	ws.MaxPollWait = time.Second
	ws.Attach(g)
	var lis net.Listener
	var err error
	for try := 0; ; try++ { // the port of a scheduler just stopped
		if lis, err = net.Listen("tcp", addr); err == nil || try == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := sched.Attach(ctx, store); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { sched.Run(ctx, 20*time.Millisecond); close(done) }()
	go g.Serve(lis)
	var once sync.Once
	stop := func() { once.Do(func() { g.Stop(); cancel(); <-done }) }
	t.Cleanup(stop)
	return &liveScheduler{sched: sched, addr: lis.Addr().String(), stop: stop}
}

// recordingWorkers is the worker's client of the worker protocol, noting
// the leases it reports in Register and in heartbeats.
type recordingWorkers struct {
	workerpb.WorkersClient
	mu         sync.Mutex
	registers  [][]string
	heartbeats [][]string
}

func (r *recordingWorkers) Register(ctx context.Context, in *workerpb.RegisterRequest, opts ...grpc.CallOption) (*workerpb.RegisterResponse, error) {
	resp, err := r.WorkersClient.Register(ctx, in, opts...)
	if err == nil {
		r.mu.Lock()
		r.registers = append(r.registers, in.LeaseIds)
		r.mu.Unlock()
	}
	return resp, err
}

func (r *recordingWorkers) Heartbeat(ctx context.Context, in *workerpb.HeartbeatRequest, opts ...grpc.CallOption) (*workerpb.HeartbeatResponse, error) {
	r.mu.Lock()
	var ids []string
	for _, l := range in.Leases {
		ids = append(ids, l.LeaseId)
	}
	r.heartbeats = append(r.heartbeats, ids)
	r.mu.Unlock()
	return r.WorkersClient.Heartbeat(ctx, in, opts...)
}

func (r *recordingWorkers) recorded() (registers, heartbeats [][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.registers), slices.Clone(r.heartbeats)
}

// storeLaterFarm is a real scheduler and a real one-core worker against
// it; marks is where the actions note each run.
type storeLaterFarm struct {
	cas   *blobstore.Memory
	ac    actioncache.Store
	store *crashStore
	sched *liveScheduler
	conn  *grpc.ClientConn
	w     *Worker
	rec   *recordingWorkers
	marks string
}

func startStoreLaterFarm(t *testing.T) *storeLaterFarm {
	t.Helper()
	f := &storeLaterFarm{cas: blobstore.NewMemory(0), ac: actioncache.NewMemory(0), store: &crashStore{Store: statestore.NewMemory()}, marks: t.TempDir()}
	f.sched = serveScheduler(t, "127.0.0.1:0", f.cas, f.ac, f.store)
	conn, err := grpc.NewClient(f.sched.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.conn = conn
	f.rec = &recordingWorkers{WorkersClient: workerpb.NewWorkersClient(conn)}
	f.w, err = New(conn, f.rec, Config{
		ID: "w1", Cores: 1, InputFetchSlots: 1, ReportSlots: 1, WorkDir: t.TempDir(), PollWait: time.Second, StoreResultsLater: true,
		Properties: []*workerpb.Property{{Name: "OSFamily", Value: "linux"}}, AcceptUnknownProperties: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, "the worker to register", func() bool { regs, _ := f.rec.recorded(); return len(regs) > 0 })
	return f
}

// execute submits an action that appends a line to its mark file once
// the file "go" is there, and returns its operation's name.
func (f *storeLaterFarm) execute(t *testing.T, n int) string {
	t.Helper()
	script := fmt.Sprintf("while [ ! -e %[1]s/go ]; do sleep 0.01; done; echo ran >> %[1]s/%[2]d", f.marks, n)
	cmd := &repb.Command{Arguments: []string{"/bin/sh", "-c", script},
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/usr/bin:/bin"}}}
	action := &repb.Action{CommandDigest: put(t, f.cas, marshal(t, cmd)).Proto(), InputRootDigest: put(t, f.cas, marshal(t, &repb.Directory{})).Proto(), DoNotCache: true}
	ad := put(t, f.cas, marshal(t, action))
	stream, err := repb.NewExecutionClient(f.conn).Execute(context.Background(), &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	op, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return op.Name
}

// executeStored submits n actions (execute) and waits until the
// scheduler stored them.
func (f *storeLaterFarm) executeStored(t *testing.T, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		names = append(names, f.execute(t, i))
	}
	if err := f.sched.sched.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return names
}

// start lets the actions run.
func (f *storeLaterFarm) start(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.marks, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// runs is how many times action n ran.
func (f *storeLaterFarm) runs(n int) int {
	b, _ := os.ReadFile(filepath.Join(f.marks, fmt.Sprint(n)))
	return strings.Count(string(b), "ran")
}

// done reports whether operation name is done, asking the scheduler.
func (f *storeLaterFarm) done(t *testing.T, name string) *longrunningpb.Operation {
	t.Helper()
	op, err := longrunningpb.NewOperationsClient(f.conn).GetOperation(context.Background(), &longrunningpb.GetOperationRequest{Name: name})
	if err != nil || !op.Done {
		return nil
	}
	return op
}

// kept are the leases of the results the worker keeps unstored.
func kept(w *Worker) []string { return w.completer.kept.leases() }

// A one-core worker whose scheduler cannot store anything runs its
// actions one after the other all the same: each action's core is free
// once its result is accepted. The results stay with the worker, not in
// its heartbeats, until the scheduler says they are stored; clients hear
// of them only then.
func TestSlotFreedWhileResultIsStored(t *testing.T) {
	f := startStoreLaterFarm(t)
	names := f.executeStored(t, 3)
	f.store.hold()
	defer f.store.release()
	f.start(t)
	waitUntil(t, "three actions to run on one core with nothing stored", func() bool { return len(kept(f.w)) == 3 })
	for n, name := range names {
		if f.runs(n) != 1 {
			t.Errorf("action %d ran %d times, want once", n, f.runs(n))
		}
		if f.done(t, name) != nil {
			t.Errorf("operation %s is done before its result is stored", name)
		}
	}
	leases := kept(f.w)
	_, before := f.rec.recorded()
	waitUntil(t, "two more heartbeats", func() bool { _, hbs := f.rec.recorded(); return len(hbs) >= len(before)+2 })
	_, hbs := f.rec.recorded()
	for _, hb := range hbs[len(before):] {
		for _, id := range hb {
			if slices.Contains(leases, id) {
				t.Errorf("a heartbeat reports lease %s, whose result is accepted and not stored", id)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	if got := kept(f.w); !slices.Equal(got, leases) {
		t.Fatalf("results kept %v while nothing is stored, want %v", got, leases)
	}

	f.store.release()
	waitUntil(t, "the stored results to be let go of", func() bool { return len(kept(f.w)) == 0 })
	for _, name := range names {
		waitUntil(t, "operation "+name+" to be done", func() bool { return f.done(t, name) != nil })
	}
}

// Results accepted and not stored when the scheduler dies are not lost:
// the worker reports their leases when it registers with the next
// scheduler on the same state, which adopts them, and sends them again;
// the operations finish with them and no action runs twice.
func TestKeptResultsAdoptedAcrossSchedulerRestart(t *testing.T) {
	f := startStoreLaterFarm(t)
	names := f.executeStored(t, 3)
	f.store.hold()
	f.start(t)
	waitUntil(t, "three results accepted and not stored", func() bool { return len(kept(f.w)) == 3 })
	leases := kept(f.w)
	registers, _ := f.rec.recorded()

	// The scheduler dies before its commit; the next one serves the
	// same address over what was stored.
	f.store.crash()
	f.sched.stop()
	next := &crashStore{Store: f.store.Store}
	f.sched = serveScheduler(t, f.sched.addr, f.cas, f.ac, next)

	waitUntil(t, "the worker to register again", func() bool { regs, _ := f.rec.recorded(); return len(regs) > len(registers) })
	regs, _ := f.rec.recorded()
	if reported := regs[len(registers)]; !isSubset(leases, reported) {
		t.Errorf("Register reported leases %v, want the kept %v among them", reported, leases)
	}
	for _, name := range names {
		waitUntil(t, "operation "+name+" to be done", func() bool { return f.done(t, name) != nil })
	}
	// Past the reconcile window nothing runs again.
	time.Sleep(2500 * time.Millisecond)
	for n := range names {
		if f.runs(n) != 1 {
			t.Errorf("action %d ran %d times, want once", n, f.runs(n))
		}
	}
	waitUntil(t, "the results stored", func() bool { return len(kept(f.w)) == 0 })
}

func isSubset(sub, of []string) bool {
	for _, s := range sub {
		if !slices.Contains(of, s) {
			return false
		}
	}
	return true
}
