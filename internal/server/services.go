package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/execution"
)

// registerSchedulerServices registers the scheduler's services
// (Execution, Operations, the worker protocol, Admin: the ones a
// frontend node forwards) on reg.
func registerSchedulerServices(reg grpc.ServiceRegistrar, exec *execution.Service, ws *execution.WorkerService, admin *execution.AdminService) {
	exec.Register(reg)
	ws.Attach(reg)
	admin.Attach(reg)
}

// serviceRecorder is a grpc.ServiceRegistrar that keeps what is
// registered on it.
type serviceRecorder struct {
	descs []*grpc.ServiceDesc
	impls map[string]any
}

func newServiceRecorder() *serviceRecorder { return &serviceRecorder{impls: map[string]any{}} }

// RegisterService implements grpc.ServiceRegistrar.
func (r *serviceRecorder) RegisterService(sd *grpc.ServiceDesc, impl any) {
	r.descs = append(r.descs, sd)
	r.impls[sd.ServiceName] = impl
}

// schedulerServiceDescs describes the scheduler's services, as
// registerSchedulerServices registers them.
func schedulerServiceDescs() []*grpc.ServiceDesc {
	rec := newServiceRecorder()
	registerSchedulerServices(rec, execution.New(nil, nil, nil, execution.Unobserved{}, nil), execution.NewWorkerService(nil, execution.Unobserved{}), execution.NewAdminService(nil, nil, execution.InMemory{}, nil, nil))
	return rec.descs
}

// serviceNames are the names of descs.
func serviceNames(descs []*grpc.ServiceDesc) []string {
	out := make([]string, len(descs))
	for i, d := range descs {
		out[i] = d.ServiceName
	}
	return out
}

// termServices are the scheduler's services on a scheduler node's gRPC
// server, which serves from the start, standing by included (health and
// reflection answer throughout): they are registered once, and each call
// goes to the implementation of the current term, or fails with
// UNAVAILABLE while the node stands by. Between taking the leadership
// and serving (restoring the state, which takes seconds with a deep
// queue) calls wait for the term instead: frontends already forward to
// this node then, and answering UNAVAILABLE at once would have every
// client and worker retry in a loop against the restore (issue 38: with
// 100,000 clients that storm took the CPU the restore needed).
type termServices struct {
	descs []*grpc.ServiceDesc
	impls atomic.Pointer[map[string]any]

	mu sync.Mutex
	// starting is closed by set once the restore ends; nil unless the
	// node is between taking the leadership and serving.
	starting chan struct{}
}

// restoreHold bounds how long a call waits for a term being restored
// (a variable for tests).
var restoreHold = time.Minute

func newTermServices() *termServices { return &termServices{descs: schedulerServiceDescs()} }

// register registers the services on g, without implementations.
func (t *termServices) register(g *grpc.Server) {
	for _, sd := range t.descs {
		g.RegisterService(t.wrap(sd), nil)
	}
}

// set makes calls go to impls (by service name); nil: this node stands
// by.
func (t *termServices) set(impls map[string]any) {
	if impls == nil {
		t.impls.Store(nil)
	} else {
		t.impls.Store(&impls)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.starting != nil {
		close(t.starting)
		t.starting = nil
	}
}

// restoring says that this node leads and restores its state: calls wait
// (up to restoreHold) for the next set.
func (t *termServices) restoring() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.starting == nil {
		t.starting = make(chan struct{})
	}
}

// errStandby answers calls to a scheduler that does not lead.
var errStandby = status.Error(codes.Unavailable, "this scheduler stands by and serves nothing but health and reflection; call a frontend, which forwards to the leader it finds in PostgreSQL")

func (t *termServices) impl(ctx context.Context, service string) (any, error) {
	m := t.impls.Load()
	if m == nil {
		t.mu.Lock()
		starting := t.starting
		t.mu.Unlock()
		if starting == nil {
			return nil, errStandby
		}
		hold := time.NewTimer(restoreHold)
		defer hold.Stop()
		select {
		case <-starting:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-hold.C:
			return nil, status.Errorf(codes.Unavailable, "this scheduler took the leadership but is still restoring its state after %v; retry", restoreHold)
		}
		if m = t.impls.Load(); m == nil {
			return nil, errStandby
		}
	}
	impl, ok := (*m)[service]
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "%s is not served by this scheduler's term; this is a bug in Gantry", service)
	}
	return impl, nil
}

// wrap returns sd whose handlers call the current term's implementation
// instead of the registered one.
func (t *termServices) wrap(sd *grpc.ServiceDesc) *grpc.ServiceDesc {
	name := sd.ServiceName
	w := *sd
	w.Methods = make([]grpc.MethodDesc, len(sd.Methods))
	for i, m := range sd.Methods {
		h := m.Handler
		w.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName, Handler: func(_ any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			impl, err := t.impl(ctx, name)
			if err != nil {
				return nil, err
			}
			return h(impl, ctx, dec, in)
		}}
	}
	w.Streams = make([]grpc.StreamDesc, len(sd.Streams))
	for i, s := range sd.Streams {
		h := s.Handler
		w.Streams[i] = s
		w.Streams[i].Handler = func(_ any, ss grpc.ServerStream) error {
			impl, err := t.impl(ss.Context(), name)
			if err != nil {
				return err
			}
			return h(impl, ss)
		}
	}
	return &w
}
