package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/protocol"
)

const (
	// opBound is the longest a submission may take, retries included,
	// before the test calls it stuck.
	opBound = 3 * time.Minute
	// attemptTimeout bounds one Execute (with its own resumptions).
	attemptTimeout = 90 * time.Second
	// retryPause is the pause between two submissions of an action.
	retryPause = 500 * time.Millisecond
	// clients is how many submissions run at once.
	clients = 3
	// actionsPerInvocation is how many actions one tool invocation submits.
	actionsPerInvocation = 8
)

// instances are the instance names the load spreads over.
var instances = []string{"", "chaos-b"}

// load submits actions through the balancer until stopped and checks every
// answer.
type load struct {
	env   actionEnv
	conns []*grpc.ClientConn
	seed  int64
	rec   *recorder
	// ctx ends at the first wrong answer, abandoning the submissions.
	ctx context.Context

	mu        sync.Mutex
	n         int
	outcomes  []*outcome
	succeeded []*outcome // fresh successful ok-kind submissions, for kindRepeat
	blobs     map[string]map[digest.Digest]bool
}

func newLoad(env actionEnv, conns []*grpc.ClientConn, seed int64, rec *recorder) *load {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-rec.stop; cancel() }()
	return &load{env: env, conns: conns, seed: seed, rec: rec, ctx: ctx, blobs: map[string]map[digest.Digest]bool{}}
}

// run submits actions from `clients` goroutines until stop is closed, and
// returns when every submission has ended.
func (l *load) run(stop <-chan struct{}) {
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(l.seed), uint64(i+1)))
			conn := l.conns[i%len(l.conns)]
			var inv string
			var instance string
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				if j%actionsPerInvocation == 0 {
					inv = client.NewUUID()
					instance = instances[r.IntN(len(instances))]
				}
				o := l.next(r, instance)
				l.submit(conn, o, inv, r)
				if l.rec.failed() {
					return
				}
			}
		}(i)
	}
	wg.Wait()
}

// next returns the next submission: a fresh action, or an earlier one again.
func (l *load) next(r *rand.Rand, instance string) *outcome {
	k := pickKind(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if k == kindRepeat && len(l.succeeded) > 0 {
		prev := l.succeeded[r.IntN(len(l.succeeded))]
		o := &outcome{a: prev.a, repeatOf: prev}
		l.outcomes = append(l.outcomes, o)
		return o
	}
	if k == kindRepeat {
		k = kindOK
	}
	l.n++
	o := &outcome{a: newAction(r, l.env, k, l.n, instance)}
	l.outcomes = append(l.outcomes, o)
	return o
}

// submit runs one submission to its end: uploads, Execute (resuming a broken
// stream), and again after a transient failure, as Bazel would, until the
// answer is final or opBound has passed.
func (l *load) submit(conn *grpc.ClientConn, o *outcome, inv string, r *rand.Rand) {
	a := o.a
	o.start = time.Now()
	defer func() { o.end = time.Now() }()
	cas := client.NewCAS(conn, a.instance, digest.SHA256, 0)
	md := metadataFor(inv, a.key)
	var cancelOnce sync.Once
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			o.retries++
			time.Sleep(retryPause)
		}
		if l.ctx.Err() != nil {
			o.final = "abandoned"
			return
		}
		if time.Since(o.start) > opBound {
			o.final = "lost"
			l.rec.wrong(fmt.Sprintf("%s (%s): no final answer within %v (%d submissions: %s; operations %v)",
				a.key, a.digest, opBound, attempt, strings.Join(o.retryWhy, "; "), o.names))
			return
		}
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(l.ctx, md), attemptTimeout)
		err := cas.PutMany(ctx, a.blobs)
		if err != nil {
			cancel()
			o.retryWhy = append(o.retryWhy, "upload: "+short(err))
			continue
		}
		l.acknowledge(a.instance, a.blobs)
		named := func(name string) {
			l.mu.Lock()
			o.names = append(o.names, name)
			l.mu.Unlock()
			if a.kind == kindCancel {
				cancelOnce.Do(func() {
					delay := time.Duration(500+r.IntN(2000)) * time.Millisecond
					go l.cancel(conn, name, delay, o)
				})
			}
		}
		resp, name, err := client.ExecuteNamed(ctx, conn, a.request, named)
		cancel()
		if err == nil {
			o.doneName = name
		}
		if err != nil {
			if a.kind == kindCancel && status.Code(unwrapStatus(err)) == codes.Canceled {
				o.final = "cancelled"
				return
			}
			o.retryWhy = append(o.retryWhy, "execute: "+short(err))
			continue
		}
		code := codes.Code(resp.GetStatus().GetCode())
		switch {
		case code == codes.Canceled && a.kind == kindCancel:
			o.final = "cancelled"
			return
		case code == codes.OK:
		case transient(code):
			o.retryWhy = append(o.retryWhy, fmt.Sprintf("status %s: %s", code, resp.GetStatus().GetMessage()))
			continue
		default:
			o.final = "wrong"
			l.rec.wrong(fmt.Sprintf("%s (%s): Execute answered status %s: %s", a.key, a.digest, code, resp.GetStatus().GetMessage()))
			return
		}
		ctx, cancel = context.WithTimeout(l.ctx, attemptTimeout)
		err = l.check(ctx, cas, a, resp.GetResult())
		cancel()
		if err != nil && l.ctx.Err() == nil && transientCheck(err) {
			o.retryWhy = append(o.retryWhy, "reading outputs: "+short(err))
			continue
		}
		if err != nil {
			o.final = "wrong"
			l.rec.wrong(fmt.Sprintf("%s (%s, kind %s, worker %s, cached %v): %v", a.key, a.digest, a.kind,
				resp.GetResult().GetExecutionMetadata().GetWorker(), resp.GetCachedResult(), err))
			return
		}
		o.result = resp.GetResult()
		o.notCached = strings.Contains(resp.GetMessage(), "the result could not be cached")
		if resp.GetCachedResult() {
			o.cachedName = name
		}
		o.final = "succeeded"
		if a.kind == kindFail {
			o.final = "failed-as-expected"
		}
		if o.repeatOf == nil && a.kind != kindFail {
			l.mu.Lock()
			l.succeeded = append(l.succeeded, o)
			l.mu.Unlock()
		}
		return
	}
}

// transient tells whether an Execute status is one a fault explains (a
// lost worker, an unreachable store, a full disk), after which Bazel tries
// again.
func transient(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.ResourceExhausted, codes.Internal, codes.Aborted, codes.DeadlineExceeded,
		codes.FailedPrecondition, codes.Unknown, codes.Canceled:
		return true
	}
	return false
}

// transientCheck tells whether a check failed on reading the CAS (a fault:
// the read is tried again with the next submission) rather than on a wrong answer.
func transientCheck(err error) bool {
	var re *readError
	return errors.As(err, &re)
}

// readError is a failure to read a blob, not a wrong blob.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// check compares a result with what the action must give.
func (l *load) check(ctx context.Context, cas *client.CAS, a *action, res *repb.ActionResult) error {
	if res == nil {
		return errors.New("status OK without a result")
	}
	if a.kind == kindFail {
		if res.ExitCode != failExit {
			return fmt.Errorf("exit code %d, want %d", res.ExitCode, failExit)
		}
		stderr := res.StderrRaw
		if len(stderr) == 0 && res.StderrDigest != nil {
			d, err := digest.FromProto(digest.SHA256, res.StderrDigest)
			if err != nil {
				return err
			}
			got, err := cas.GetMany(ctx, []digest.Digest{d})
			if err != nil {
				return &readError{fmt.Errorf("reading its stderr %s: %w", d, err)}
			}
			stderr = got[d]
		}
		if !bytes.Contains(stderr, []byte(failMessage+": "+a.key)) {
			return fmt.Errorf("stderr %q, want it to say %q", stderr, failMessage+": "+a.key)
		}
		return nil
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("exit code %d (stderr %q), want 0", res.ExitCode, res.StderrRaw)
	}
	got := map[string]digest.Digest{}
	for _, f := range res.OutputFiles {
		d, err := digest.FromProto(digest.SHA256, f.Digest)
		if err != nil {
			return fmt.Errorf("output %s: %v", f.Path, err)
		}
		got[f.Path] = d
	}
	if len(got) != len(a.want) {
		return fmt.Errorf("outputs %v, want %d files", got, len(a.want))
	}
	acked := map[digest.Digest][]byte{}
	for path, want := range a.want {
		d, ok := got[path]
		if !ok {
			return fmt.Errorf("no output %s (outputs %v)", path, got)
		}
		if wd := digest.Compute(digest.SHA256, want); d != wd {
			return fmt.Errorf("output %s is %s, want %s", path, d, wd)
		}
		acked[d] = want
	}
	// The small output read back now; every acknowledged blob again at the end.
	d := got["out/out.txt"]
	b, err := cas.GetMany(ctx, []digest.Digest{d})
	if err != nil {
		return &readError{fmt.Errorf("reading output out/out.txt %s: %w", d, err)}
	}
	if !bytes.Equal(b[d], a.want["out/out.txt"]) {
		return fmt.Errorf("output out/out.txt %s reads back as %q, want %q", d, b[d], a.want["out/out.txt"])
	}
	l.acknowledge(a.instance, acked)
	return nil
}

// acknowledge records blobs the server said it holds, for the final check.
func (l *load) acknowledge(instance string, blobs map[digest.Digest][]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.blobs[instance]
	if m == nil {
		m = map[digest.Digest]bool{}
		l.blobs[instance] = m
	}
	for d := range blobs {
		m[d] = true
	}
}

// cancel sends CancelOperation for name after delay.
func (l *load) cancel(conn *grpc.ClientConn, name string, delay time.Duration, o *outcome) {
	time.Sleep(delay)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := longrunningpb.NewOperationsClient(conn).CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: name})
	l.mu.Lock()
	o.cancelled = err == nil
	l.mu.Unlock()
}

// metadataFor is the RequestMetadata header of an invocation's action.
func metadataFor(invocation, actionID string) metadata.MD {
	b := mustMarshal(&repb.RequestMetadata{
		ToolDetails:      &repb.ToolDetails{ToolName: "gantry-chaos"},
		ActionId:         actionID,
		ToolInvocationId: invocation,
	})
	return metadata.Pairs(protocol.RequestMetadataHeader, string(b))
}

// unwrapStatus finds a gRPC status in an error chain.
func unwrapStatus(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if _, ok := status.FromError(e); ok {
			return e
		}
	}
	return err
}

func short(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
