package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/client"
)

// pageSlack is how much a status page may grow between the idle and the
// loaded state and still count as bounded: a page that lists the queue
// grows by tens of bytes per queued action, far more at 10,000.
const pageSlack = 64 << 10

// RunScale runs plan: it starts the worker processes, queues every action
// with the workers held back, measures the loaded server, lets the
// workers drain the queue, and checks that every action completed once
// and was leased once. tmp holds the worker processes' reports. It
// returns the report even when a check failed (with the error).
func RunScale(ctx context.Context, plan *ScalePlan, dial Dialer, tmp string, progress io.Writer) (*ScaleReport, error) {
	ctx, cancel := context.WithTimeout(ctx, plan.Timeout)
	defer cancel()
	conns := make([]*grpc.ClientConn, plan.Conns)
	for i := range conns {
		c, err := dial(plan.Server)
		if err != nil {
			return nil, fmt.Errorf("--server: %w", err)
		}
		defer c.Close()
		conns[i] = c
	}
	caps, err := prepareScaleServer(ctx, plan, conns[0])
	if err != nil {
		return nil, err
	}
	var kill *scaleKill
	if plan.KillAfter > 0 {
		kill = &scaleKill{plan: plan}
		if err := kill.checkRoles(ctx); err != nil {
			return nil, err
		}
		// The Execute sent after the kill is a new client's: a connection
		// of its own, not one of the clients' in their reconnection storm.
		c, err := dial(plan.Server)
		if err != nil {
			return nil, fmt.Errorf("--server: %w", err)
		}
		defer c.Close()
		kill.conn = c
	}
	rep := &ScaleReport{Workers: plan.Workers, Slots: plan.Slots, Tenants: plan.Tenants, Invocations: plan.Invocations, Queued: plan.Queued, MeanSleepMs: ms(plan.MeanSleep), Drop: plan.Drop}
	s0, err := readProc(plan.ServerPID)
	if err != nil {
		return nil, err
	}
	rep.RSSIdle, rep.GoroutinesIdle, rep.FilesIdle = s0.RSS, goroutines(ctx, plan.HTTP), s0.Files

	// The workers: registered, held back until the queue is full.
	run := "scale-" + client.NewUUID()[:8]
	fmt.Fprintf(progress, "bench scale: starting %d workers × %d slots in %d processes\n", plan.Workers, plan.Slots, plan.WorkerProcs)
	var procs []*workerProc
	stopProcs := func() ([]*scaleWorkersReport, error) {
		var reps []*scaleWorkersReport
		var first error
		for _, p := range procs {
			r, err := p.stop()
			if err != nil && first == nil {
				first = err
			}
			if r != nil {
				reps = append(reps, r)
			}
		}
		procs = nil
		return reps, first
	}
	defer stopProcs()
	if err := startScaleWorkers(ctx, plan, run, tmp, &procs); err != nil {
		return nil, err
	}
	s1, err := readProc(plan.ServerPID)
	if err != nil {
		return nil, err
	}
	rep.RSSWorkers = s1.RSS
	rep.RegisterCPUPerWorkerMs = roundTo(ms(s1.CPU-s0.CPU)/float64(plan.Workers), 4)
	rep.RSSPerWorker = float64(s1.RSS-s0.RSS) / float64(plan.Workers)
	if plan.HTTP != "" {
		rep.PagesIdle = timePages(ctx, plan.HTTP, plan.Server, plan.Binary)
	}

	// The queue.
	items := scaleItems(plan, run)
	probe := &scaleItem{id: run + "-probe", instance: ScaleProbeTenant, invocation: run + "-probe", tenant: -1, inv: -1}
	probe.build(scalePools[0])
	extra := []*scaleItem{probe}
	if kill != nil {
		kill.probe = &scaleItem{id: run + "-after-kill", instance: scaleTenant(0), invocation: run + "-after-kill", tenant: -1, inv: -1}
		kill.probe.build(scalePools[1])
		extra = append(extra, kill.probe)
		for _, it := range append(slices.Clone(items), extra...) {
			it.retry = true
		}
	}
	start := time.Now()
	if err := uploadItems(ctx, conns[0], client.BatchLimit(caps), append(slices.Clone(items), extra...)); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "bench scale: uploaded %d actions in %v; queueing them\n", len(items), time.Since(start).Round(time.Millisecond))
	follow := make(chan struct{})
	done, ok := queueScaleItems(ctx, conns, items, follow)
	if !ok {
		return rep, fmt.Errorf("queueing %d actions did not finish within --timeout %s", len(items), plan.Timeout)
	}
	rep.QueueSeconds = time.Since(start).Seconds()
	s2, err := readProc(plan.ServerPID)
	if err != nil {
		return nil, err
	}
	rep.RSSLoaded, rep.GoroutinesLoaded, rep.FilesLoaded = s2.RSS, goroutines(ctx, plan.HTTP), s2.Files
	rep.RSSPerQueued = float64(s2.RSS-s1.RSS) / float64(plan.Queued)
	fmt.Fprintf(progress, "bench scale: %d actions queued in %.1fs; measuring the loaded server\n", len(items), rep.QueueSeconds)
	if plan.HTTP != "" {
		rep.PagesLoaded = timePages(ctx, plan.HTTP, plan.Server, plan.Binary)
		rep.MemLoaded = readMemStats(ctx, plan.HTTP)
		// A heap profile after a collection: what is live, not what
		// the GC has yet to find.
		if plan.HeapProfile != "" {
			if err := saveProfile(ctx, plan.HTTP, "heap?gc=1", plan.HeapProfile); err != nil {
				return nil, err
			}
			rep.MemLive = readMemStats(ctx, plan.HTTP)
		}
	}

	if plan.Hold > 0 {
		fmt.Fprintf(progress, "bench scale: holding the loaded state for %s (--hold)\n", plan.Hold)
		if rep.HeartbeatCPUPerWorkerSecMs, err = heartbeatCPU(ctx, plan); err != nil {
			return nil, err
		}
	}

	// The drain.
	d0, err := readProc(plan.ServerPID)
	if err != nil {
		return nil, err
	}
	var cpuErr error
	var cpuWG sync.WaitGroup
	if plan.CPUProfile != "" && plan.HTTP != "" {
		cpuWG.Add(1)
		go func() {
			defer cpuWG.Done()
			cpuErr = saveProfile(ctx, plan.HTTP, "profile?seconds=10", plan.CPUProfile)
		}()
	}
	peakRSS := sampleRSS(ctx, plan.ServerPID, s2.RSS)
	handoffsBefore := scrapeHandoffs(ctx, plan.HTTP)
	t0 := time.Now()
	for _, p := range procs {
		if _, err := io.WriteString(p.gate, "go\n"); err != nil {
			return nil, fmt.Errorf("starting the workers: %w", err)
		}
	}
	time.AfterFunc(time.Second, func() { close(follow) })
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		probe.execute(ctx, conns[0], make(chan struct{}, 1), func() {}, follow)
	}()
	var killWG sync.WaitGroup
	if kill != nil {
		killWG.Add(1)
		go func() {
			if !sleepCtx(ctx, plan.KillAfter) {
				killWG.Done()
				return
			}
			fmt.Fprintf(progress, "bench scale: %s into the drain; SIGKILL to the server (pid %d)\n", plan.KillAfter, plan.ServerPID)
			kill.run(ctx, &killWG)
			<-kill.done
			fmt.Fprintf(progress, "bench scale: a scheduler serves %v after the kill, Execute answered after %v\n",
				kill.back.Sub(kill.at).Round(time.Millisecond), kill.execute.Sub(kill.at).Round(time.Millisecond))
		}()
	}
	drained := make(chan struct{})
	go func() { done.Wait(); <-probeDone; killWG.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-ctx.Done():
	}
	peak := peakRSS()
	if kill == nil {
		rep.summarizeHandoffs(handoffsBefore, scrapeHandoffs(ctx, plan.HTTP))
	}
	// A killed server has no figures left to read.
	endPID := plan.ServerPID
	if kill != nil {
		endPID = 0
	}
	s3, err := readProc(endPID)
	if err != nil {
		return nil, err
	}
	reps, procErr := stopProcs()
	cpuWG.Wait()
	rep.RSSPeak = max(peak, s3.RSS)
	rep.RSSPeakPerQueued = float64(rep.RSSPeak-s1.RSS) / float64(plan.Queued)
	rep.FilesPeak = s3.Files
	rep.summarize(items, probe, extra[1:], reps, t0, s3.CPU-d0.CPU)
	if kill != nil {
		rep.CPUPerActionMs = 0 // the killed server's CPU is gone with it
		if kill.done != nil {
			<-kill.done
		}
		rep.summarizeKill(kill, items, reps)
	}
	if ctx.Err() != nil {
		return rep, fmt.Errorf("the run did not finish within --timeout %s: %d of %d actions completed", plan.Timeout, rep.Completed, plan.Queued)
	}
	if procErr != nil {
		return rep, procErr
	}
	if cpuErr != nil {
		return rep, cpuErr
	}
	return rep, rep.check()
}

// startScaleWorkers starts plan's worker processes, held back until told
// to go, adding each to procs (the caller stops them), and waits until
// every one has registered its workers.
func startScaleWorkers(ctx context.Context, plan *ScalePlan, run, tmp string, procs *[]*workerProc) error {
	for i := range plan.WorkerProcs {
		first, end := i*plan.Workers/plan.WorkerProcs, (i+1)*plan.Workers/plan.WorkerProcs
		p, err := startWorkerProc(ctx, plan.Binary, plan, run, first, end-first, filepath.Join(tmp, fmt.Sprintf("workers-%d.json", i)))
		if err != nil {
			return err
		}
		*procs = append(*procs, p)
	}
	for _, p := range *procs {
		if err := <-p.ready; err != nil {
			return err
		}
	}
	return nil
}

// queueScaleItems sends each item's Execute (at most 256 opening at
// once, over conns in turn; each follows its operation once follow is
// closed) and waits until all are queued; ok is false when ctx ended
// first. done is done when every Execute has ended.
func queueScaleItems(ctx context.Context, conns []*grpc.ClientConn, items []*scaleItem, follow chan struct{}) (done *sync.WaitGroup, ok bool) {
	openSem := make(chan struct{}, 256)
	var queued sync.WaitGroup
	done = &sync.WaitGroup{}
	queued.Add(len(items))
	done.Add(len(items))
	for i, it := range items {
		go func() {
			defer done.Done()
			it.execute(ctx, conns[i%len(conns)], openSem, queued.Done, follow)
		}()
	}
	allQueued := make(chan struct{})
	go func() { queued.Wait(); close(allQueued) }()
	select {
	case <-allQueued:
		return done, true
	case <-ctx.Done():
		return done, false
	}
}

// prepareScaleServer checks that the server at conn answers and gives the
// probe tenant its min quota on every cohort; it returns the server's
// capabilities.
func prepareScaleServer(ctx context.Context, plan *ScalePlan, conn *grpc.ClientConn) (*repb.ServerCapabilities, error) {
	caps, err := client.GetCapabilities(ctx, conn, scaleTenant(0))
	if err != nil {
		return nil, fmt.Errorf("cannot use the server at %s: %w; check --server and that the server runs", plan.Server, err)
	}
	admin := adminpb.NewAdminClient(conn)
	for _, c := range scaleCohorts {
		if _, err := admin.PutQuota(ctx, &adminpb.PutQuotaRequest{InstanceName: ScaleProbeTenant, Cohort: c, MinQuota: 1}); err != nil {
			return nil, fmt.Errorf("setting the probe tenant's min quota on cohort %s: %w; start the server with the configuration of `gantry bench scale --print-config`", c, err)
		}
	}
	return caps, nil
}

// sampleRSS samples pid's RSS every 100 ms from now on; peak stops the
// sampling and returns the largest seen, at least from.
func sampleRSS(ctx context.Context, pid int, from int64) (peak func() int64) {
	ctx, stop := context.WithCancel(ctx)
	done := make(chan int64, 1)
	go func() {
		p := from
		for sleepCtx(ctx, 100*time.Millisecond) {
			if s, err := readProc(pid); err == nil {
				p = max(p, s.RSS)
			}
		}
		done <- p
	}()
	return sync.OnceValue(func() int64 { stop(); return <-done })
}

// heartbeatCPU holds the loaded state for plan.Hold, while the workers
// only heartbeat, and returns the server's CPU per worker and second.
func heartbeatCPU(ctx context.Context, plan *ScalePlan) (float64, error) {
	before, err := readProc(plan.ServerPID)
	if err != nil {
		return 0, err
	}
	held := time.Now()
	sleepCtx(ctx, plan.Hold)
	after, err := readProc(plan.ServerPID)
	if err != nil {
		return 0, err
	}
	return roundTo(ms(after.CPU-before.CPU)/float64(plan.Workers)/time.Since(held).Seconds(), 5), nil
}

// WriteJSON writes the report to path.
func (r *ScaleReport) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
