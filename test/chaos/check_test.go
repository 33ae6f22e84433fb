package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/testutil/cluster"
)

const (
	// settle bounds the waits of the final checks (operations done, queues
	// empty, action processes gone).
	settle = 90 * time.Second
	// faultGrace is how long after its repair a fault still explains a
	// second run of an action (a lease given back after the heartbeat
	// timeout, a restarted leader restoring its state).
	faultGrace = 30 * time.Second
)

// finalCheck checks the whole run once the load has drained.
type finalCheck struct {
	f       *farm
	l       *load
	b       *builds // nil when the builds are left out
	rec     *recorder
	counter *runCounter
	conn    *grpc.ClientConn
	marker  string

	// Filled by run, for the summary.
	states       map[string]int
	runsDist     map[int]int
	duplicates   int
	repeatsRan   int
	acChecked    int
	acMissing    int
	blobsChecked int
	names        int
	most         []string // the actions that ran 3 times or more, and why
	// cachedForgotten counts operation names answered from the ActionCache
	// that GetOperation no longer knows at the end, each with a leader
	// kill or a PostgreSQL stop to explain it (reported, not failed).
	cachedForgotten int
	// brokenForgotten counts names whose Execute call failed before the
	// operation was submitted, unknown at the end, each explained so too.
	brokenForgotten int
	retries         int
	longestFault    time.Duration
	longestCalm     time.Duration
}

func (c *finalCheck) run() {
	c.operations()
	c.actionCache()
	c.blobs()
	c.queues()
	c.processes()
	c.runs()
}

func (c *finalCheck) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), settle)
}

// operations: every operation name the client was given is known and done.
func (c *finalCheck) operations() {
	ops := longrunningpb.NewOperationsClient(c.conn)
	deadline := time.Now().Add(settle)
	for _, o := range c.l.outcomes {
		for _, name := range o.names {
			c.names++
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				op, err := ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: name})
				cancel()
				if err == nil && op.Done {
					break
				}
				if status.Code(err) == codes.NotFound && (name != o.doneName || name == o.cachedName) &&
					c.rec.during(o.start, o.end.Add(faultGrace), faultGrace, "kill-leader", "stop-postgres") {
					// An operation Execute ended itself (a cache hit, a call
					// failed before the submit) is stored with the finished
					// ones without waiting for the commit: a leader killed, or
					// PostgreSQL stopped, before that commit forgets it. Any
					// other name unknown at the end is a lost operation.
					if name == o.cachedName {
						c.cachedForgotten++
					} else {
						c.brokenForgotten++
					}
					break
				}
				if status.Code(err) == codes.NotFound || time.Now().After(deadline) {
					c.rec.wrong(fmt.Sprintf("operation %s of %s (%s, outcome %s, submitted at %s, answered at %s) is not done at the end: %v, %v",
						name, o.a.key, o.a.kind, o.final, c.rec.since(o.start), c.rec.since(o.end), op, err))
					break
				}
				time.Sleep(time.Second)
			}
		}
	}
}

// actionCache: each action's ActionCache entry, where there is one, holds
// the right result; a successful one's entry is there.
func (c *finalCheck) actionCache() {
	ac := repb.NewActionCacheClient(c.conn)
	seen := map[digest.Digest]bool{}
	for _, o := range c.l.outcomes {
		a := o.a
		if seen[a.digest] || o.repeatOf != nil {
			continue
		}
		seen[a.digest] = true
		ctx, cancel := c.ctx()
		res, err := ac.GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: a.instance, ActionDigest: a.digest.Proto()})
		cancel()
		c.acChecked++
		if status.Code(err) == codes.NotFound {
			switch {
			case o.final != "succeeded":
			case o.notCached:
				// The client was told: the write failed past its retries.
				c.acMissing++
			default:
				c.rec.wrong(fmt.Sprintf("%s (%s) succeeded with no note, but the ActionCache has no entry for it: %v", a.key, a.digest, err))
			}
			continue
		}
		if err != nil {
			c.rec.wrong(fmt.Sprintf("GetActionResult of %s (%s): %v", a.key, a.digest, err))
			continue
		}
		cas := client.NewCAS(c.conn, a.instance, digest.SHA256, 0)
		ctx, cancel = c.ctx()
		err = c.l.check(ctx, cas, a, res)
		cancel()
		if err != nil {
			c.rec.wrong(fmt.Sprintf("the ActionCache entry of %s (%s, kind %s) is wrong: %v", a.key, a.digest, a.kind, err))
		}
	}
}

// blobs: every blob acknowledged to the client is there and reads back
// with its digest.
func (c *finalCheck) blobs() {
	for instance, set := range c.l.blobs {
		cas := client.NewCAS(c.conn, instance, digest.SHA256, 0)
		var ds []digest.Digest
		for d := range set {
			ds = append(ds, d)
		}
		ctx, cancel := c.ctx()
		missing, err := cas.FindMissing(ctx, ds)
		cancel()
		if err != nil {
			c.rec.wrong(fmt.Sprintf("FindMissingBlobs of %d acknowledged blobs (instance %q): %v", len(ds), instance, err))
			continue
		}
		if len(missing) > 0 {
			c.rec.wrong(fmt.Sprintf("%d of %d acknowledged blobs are missing (instance %q), e.g. %s", len(missing), len(ds), instance, missing[0]))
		}
		for _, d := range ds {
			ctx, cancel := c.ctx()
			b, err := blobstore.Get(ctx, cas, d)
			cancel()
			c.blobsChecked++
			if err != nil {
				c.rec.wrong(fmt.Sprintf("reading acknowledged blob %s (instance %q): %v", d, instance, err))
				continue
			}
			if got := digest.Compute(digest.SHA256, b); got != d {
				c.rec.wrong(fmt.Sprintf("acknowledged blob %s (instance %q) reads back as %s", d, instance, got))
			}
		}
	}
}

// queues: once the load has drained, the leader holds no queued and no
// leased action, and no worker holds a lease: the scheduler's queues and
// the workers agree.
func (c *finalCheck) queues() {
	deadline := time.Now().Add(settle)
	last := ""
	for {
		if l := c.f.leader(); l != nil {
			q, qerr := cluster.Gauge(l.HTTPAddr, "gantry_scheduler_queued_actions")
			s, lerr := cluster.Gauge(l.HTTPAddr, "gantry_scheduler_leased_actions")
			held, herr := c.workerLeases()
			if qerr == nil && lerr == nil && herr == nil && q == 0 && s == 0 && held == 0 {
				return
			}
			last = fmt.Sprintf("leader %s: %v queued (%v), %v leased (%v); the workers hold %v leases (%v)", l.Name, q, qerr, s, lerr, held, herr)
		} else {
			last = "no leader"
		}
		if time.Now().After(deadline) {
			c.rec.wrong(fmt.Sprintf("the scheduler is not idle %v after the load ended: %s", settle, last))
			return
		}
		time.Sleep(time.Second)
	}
}

// workerLeases is the sum of the workers' gantry_worker_active_leases.
func (c *finalCheck) workerLeases() (float64, error) {
	var sum float64
	for _, w := range c.f.workers {
		n, err := cluster.Gauge(w.HTTPAddr, "gantry_worker_active_leases")
		if err != nil {
			return 0, fmt.Errorf("%s: %w", w.Name, err)
		}
		sum += n
	}
	return sum, nil
}

// processes: no process of an action outlives it.
func (c *finalCheck) processes() {
	deadline := time.Now().Add(settle)
	for {
		left := actionProcesses(c.marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.rec.wrong(fmt.Sprintf("%d action processes outlive their actions %v after the load ended: %v", len(left), settle, left))
			return
		}
		time.Sleep(time.Second)
	}
}

// runs: each action ran as often as its answer and the faults explain.
func (c *finalCheck) runs() {
	windows := c.rec.windows(faultGrace)
	overlapping := func(o *outcome) int {
		n := 0
		for _, w := range windows {
			if w[0].Before(o.end) && o.start.Before(w[1]) {
				n++
			}
		}
		return n
	}
	c.states, c.runsDist = map[string]int{}, map[int]int{}
	root := os.Geteuid() == 0
	for _, o := range c.l.outcomes {
		c.retries += o.retries
		faults := overlapping(o)
		wait := o.end.Sub(o.start)
		if faults > 0 {
			c.longestFault = max(c.longestFault, wait)
		} else {
			c.longestCalm = max(c.longestCalm, wait)
		}
		a := o.a
		runs := c.counter.of(a.key)
		if o.repeatOf != nil {
			c.states["repeat-"+o.final]++
			for _, r := range runs {
				if r.at.After(o.start) && r.at.Before(o.end) {
					c.repeatsRan++
					break
				}
			}
			continue
		}
		c.states[string(a.kind)+"-"+o.final]++
		c.runsDist[len(runs)]++
		if len(runs) > 1 {
			c.duplicates += len(runs) - 1
		}
		if len(runs) >= 3 {
			why := ""
			if len(o.retryWhy) > 0 {
				why = o.retryWhy[len(o.retryWhy)-1]
			}
			c.most = append(c.most, fmt.Sprintf("%s ran %d times (%d faults in its time, %d retries; last retry: %s)", a.key, len(runs), faults, o.retries, why))
		}
		if (o.final == "succeeded" || o.final == "failed-as-expected") && len(runs) == 0 {
			c.rec.wrong(fmt.Sprintf("%s (%s): the client got a result (%s), but the action never ran", a.key, a.digest, o.final))
		}
		if len(runs) > 1 && faults == 0 {
			c.rec.wrong(fmt.Sprintf("%s (%s): ran %d times from %s to %s with no fault then", a.key, a.digest, len(runs),
				c.rec.since(o.start), c.rec.since(o.end)))
		}
		if bound := 1 + faults + o.retries; len(runs) > bound {
			c.rec.wrong(fmt.Sprintf("%s (%s): ran %d times, more than 1 + %d faults + %d retries", a.key, a.digest, len(runs), faults, o.retries))
		}
		if a.kind == kindSandboxed && root {
			for _, r := range runs {
				if r.uid != sandboxUID {
					c.rec.wrong(fmt.Sprintf("%s: a sandboxed action ran as uid %s, want %s (the sandbox's)", a.key, r.uid, sandboxUID))
				}
			}
		}
	}
}

// summary is the run's record, for docs/OPERATIONS.md.
func (c *finalCheck) summary(duration time.Duration) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "chaos summary: seed %d, %v of faults\n", c.rec.seed, duration)
	fmt.Fprintf(&b, "  faults by kind: %s\n", summaryLine(c.rec.byKind()))
	fmt.Fprintf(&b, "  worker kills by the stage of its actions: %s\n", summaryLine(c.rec.killsByStage()))
	fmt.Fprintf(&b, "  submissions by kind and outcome: %s\n", summaryLine(c.states))
	fmt.Fprintf(&b, "  runs per fresh action (runs: actions): %s; duplicate runs %d; repeats that ran again %d\n", summaryLine(c.runsDist), c.duplicates, c.repeatsRan)
	for _, m := range c.most {
		fmt.Fprintf(&b, "    %s\n", m)
	}
	fmt.Fprintf(&b, "  client retries %d; operation names checked %d (unknown at the end: %d answered from the ActionCache, %d whose Execute failed before submitting); ActionCache entries checked %d (%d successful ones missing, each answered with \"could not be cached\"); blobs read back %d\n",
		c.retries, c.names, c.cachedForgotten, c.brokenForgotten, c.acChecked, c.acMissing, c.blobsChecked)
	fmt.Fprintf(&b, "  builds: %s\n", c.b.summary())
	fmt.Fprintf(&b, "  longest submission: %v with a fault in its time, %v without\n", c.longestFault.Round(time.Millisecond), c.longestCalm.Round(time.Millisecond))
	fmt.Fprintf(&b, "  fault log:\n%s", c.rec.faultLog())
	return b.String()
}
