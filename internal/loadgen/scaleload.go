package loadgen

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/protocol"
)

// scaleItem is one action of a scale run.
type scaleItem struct {
	id          string
	tenant, inv int
	instance    string
	invocation  string
	sleep       time.Duration
	drop        bool
	digest      digest.Digest
	blobs       map[digest.Digest][]byte

	name   string        // the operation, once queued
	doneAt time.Time     // when its result arrived
	err    error         // why it failed
	wait   time.Duration // Execute call to result

	// retry: the run kills the server, so calls that fail UNAVAILABLE
	// are retried; brokeAt is when the item's stream first broke, backAt
	// when it next heard of its operation.
	retry           bool
	brokeAt, backAt time.Time
}

// scaleItems makes the plan's actions: invocation sizes Zipf-skewed,
// invocation j of tenant j mod Tenants, pools uniform, sleeps exponential
// around MeanSleep (at most 10 times it).
func scaleItems(plan *ScalePlan, run string) []*scaleItem {
	rng := rand.New(rand.NewPCG(plan.Seed, 38))
	zipf := rand.NewZipf(rng, plan.Zipf, 1, uint64(plan.Invocations-1))
	items := make([]*scaleItem, plan.Queued)
	for i := range items {
		inv := int(zipf.Uint64())
		// Spread the big invocations over the tenants.
		inv = (inv*7919 + 1) % plan.Invocations
		var sleep time.Duration
		if plan.MeanSleep > 0 {
			sleep = time.Duration(min(rng.ExpFloat64(), 10) * float64(plan.MeanSleep)).Round(time.Millisecond)
		}
		t := inv % plan.Tenants
		items[i] = &scaleItem{
			id: fmt.Sprintf("%s-%d", run, i), tenant: t, inv: inv,
			instance: scaleTenant(t), invocation: fmt.Sprintf("%s-inv-%d", run, inv),
			sleep: sleep, drop: rng.Float64() < plan.Drop,
		}
		items[i].build(scalePools[rng.IntN(len(scalePools))])
	}
	return items
}

// build makes the item's Command and Action and their blobs.
func (it *scaleItem) build(pool string) {
	platform := &repb.Platform{Properties: []*repb.Platform_Property{{Name: scalePool, Value: pool}}}
	cmd := &repb.Command{
		Arguments: []string{"true"},
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{
			{Name: benchIDVar, Value: it.id},
			{Name: scaleSleepVar, Value: strconv.FormatInt(it.sleep.Milliseconds(), 10)},
		},
		Platform: platform,
	}
	it.blobs = map[digest.Digest][]byte{}
	put := func(m proto.Message) digest.Digest {
		data, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		d := digest.Compute(digest.SHA256, data)
		it.blobs[d] = data
		return d
	}
	cd := put(cmd)
	it.digest = put(&repb.Action{CommandDigest: cd.Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto(), Platform: platform})
}

// uploadItems uploads every item's Command and Action, a batch of items
// at a time per instance, 8 batches at once.
func uploadItems(ctx context.Context, conn *grpc.ClientConn, batchLimit int64, items []*scaleItem) error {
	byInstance := map[string][]*scaleItem{}
	for _, it := range items {
		byInstance[it.instance] = append(byInstance[it.instance], it)
	}
	sem := make(chan struct{}, 8)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for inst, its := range byInstance {
		cas := client.NewCAS(conn, inst, digest.SHA256, batchLimit)
		for start := 0; start < len(its); start += 200 {
			batch := map[digest.Digest][]byte{}
			for _, it := range its[start:min(start+200, len(its))] {
				for d, b := range it.blobs {
					batch[d] = b
				}
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if err := cas.PutNew(ctx, batch); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("uploading the actions of instance %s: %w", inst, err)
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	for _, it := range items {
		it.blobs = nil
	}
	return firstErr
}

// execute runs the item: Execute, and once the operation is queued it
// tells queued. An item that drops its stream waits for follow and then
// follows the operation with WaitExecution. With it.retry (a run that
// kills the server) a call that fails UNAVAILABLE is retried, as Bazel
// does: Execute until it is answered, and once the operation has a name,
// WaitExecution on it (brokeAt and backAt say when the stream broke and
// when the client followed its operation again). It returns when the
// operation is done (it.err says how).
func (it *scaleItem) execute(ctx context.Context, conn grpc.ClientConnInterface, openSem chan struct{}, queued func(), follow <-chan struct{}) {
	exec := repb.NewExecutionClient(conn)
	rm, _ := proto.Marshal(&repb.RequestMetadata{ToolInvocationId: it.invocation, ToolDetails: &repb.ToolDetails{ToolName: "gantry-bench-scale"}})
	ctx = metadata.AppendToOutgoingContext(ctx, protocol.RequestMetadataHeader, string(rm))
	start := time.Now()
	openSem <- struct{}{}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		stream grpc.ServerStreamingClient[longrunningpb.Operation]
		first  *repb.ExecuteResponse
		err    error
	)
	for b := newBackoff(); ; {
		stream, err = exec.Execute(sctx, &repb.ExecuteRequest{InstanceName: it.instance, ActionDigest: it.digest.Proto(), DigestFunction: digest.SHA256})
		if err == nil {
			var o *longrunningpb.Operation
			if o, err = stream.Recv(); err == nil {
				it.name = o.Name
				if o.Done {
					first, err = unpackOperation(o)
				}
			}
		}
		if err == nil || !it.retry || !transient(err) || !b.wait(ctx) {
			break
		}
	}
	<-openSem
	queued()
	if err != nil {
		it.err = fmt.Errorf("Execute: %w", err)
		return
	}
	if first == nil && it.drop {
		cancel()
		select {
		case <-follow:
		case <-ctx.Done():
			it.err = ctx.Err()
			return
		}
		stream = nil
	}
	resp := first
	b := newBackoff()
	for resp == nil {
		if stream == nil {
			stream, err = exec.WaitExecution(ctx, &repb.WaitExecutionRequest{Name: it.name})
			if err != nil {
				if it.retry && transient(err) && b.wait(ctx) {
					stream = nil
					continue
				}
				it.err = fmt.Errorf("WaitExecution(%s): %w", it.name, err)
				return
			}
		}
		o, err := stream.Recv()
		if err != nil {
			if it.retry && transient(err) && ctx.Err() == nil {
				if it.brokeAt.IsZero() {
					it.brokeAt = time.Now()
				}
				stream = nil
				b.wait(ctx)
				continue
			}
			what := "the stream broke"
			if status.Code(err) == codes.NotFound {
				what = "the server does not know it (not restored?)"
			}
			it.err = fmt.Errorf("operation %s: %s: %w", it.name, what, err)
			return
		}
		if !it.brokeAt.IsZero() && it.backAt.IsZero() {
			it.backAt = time.Now()
		}
		b = newBackoff()
		if o.Done {
			if resp, err = unpackOperation(o); err != nil {
				it.err = err
				return
			}
		}
	}
	it.doneAt = time.Now()
	it.wait = it.doneAt.Sub(start)
	if resp.CachedResult {
		it.err = fmt.Errorf("operation %s: answered from the action cache, but every action is unique", it.name)
		return
	}
	if err := client.CheckResponse(resp); err != nil {
		it.err = fmt.Errorf("operation %s: %w", it.name, err)
	}
}

// backoff spaces a client's retries: from 50 ms, doubling up to 2 s, each
// wait drawn at random from half to all of it, so that a hundred thousand
// clients whose streams broke at once do not retry in step.
type backoff struct{ next time.Duration }

func newBackoff() *backoff { return &backoff{next: 50 * time.Millisecond} }

// wait sleeps before the next try; it reports false when ctx ended.
func (b *backoff) wait(ctx context.Context) bool {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, 2*time.Second)
	return sleepCtx(ctx, d)
}

// unpackOperation is the ExecuteResponse of a done operation.
func unpackOperation(op *longrunningpb.Operation) (*repb.ExecuteResponse, error) {
	if e := op.GetError(); e != nil {
		return nil, fmt.Errorf("operation %s failed: %w", op.Name, status.ErrorProto(e))
	}
	resp := &repb.ExecuteResponse{}
	if err := op.GetResponse().UnmarshalTo(resp); err != nil {
		return nil, fmt.Errorf("operation %s: its response is not an ExecuteResponse: %v", op.Name, err)
	}
	return resp, nil
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when one
// has everything. It is 0 for no values.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum, sq = sum+x, sq+x*x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// roundTo rounds x to n decimals, for the report.
func roundTo(x float64, n int) float64 {
	p := math.Pow(10, float64(n))
	return math.Round(x*p) / p
}
