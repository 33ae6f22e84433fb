package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker"
)

// BenchmarkDrainSignal measures the autoscaling signal against a real
// drain: a server without workers learns the durations of "sleep N"
// actions (one run of each on a warm-up worker), a queue of such actions
// is submitted, the workers GET /status/autoscaling asks for are
// started (one core each, in this process; the actions are real
// processes), and the time until the last action finishes is set
// against scheduler.autoscaling.target_drain. The actions sleep, so the
// drain does not depend on the machine's cores.
// go test -run '^$' -bench DrainSignal -benchtime 1x ./internal/server
func BenchmarkDrainSignal(b *testing.B) {
	type shape struct {
		secs, n int
	}
	for _, c := range []struct {
		name   string
		target time.Duration
		queue  []shape
	}{
		// 48 even actions: 96s of work.
		{"even-2s/target-20s", 20 * time.Second, []shape{{2, 48}}},
		{"even-2s/target-40s", 40 * time.Second, []shape{{2, 48}}},
		// Skewed: 60 x 1s and 4 x 8s, 92s of work; the long ones bound
		// the drain from below.
		{"skewed-1s-8s/target-20s", 20 * time.Second, []shape{{1, 60}, {8, 4}}},
		// A few long actions: 6 x 9s, 54s of work for a 20s target: 3
		// workers, two actions each.
		{"long-9s/target-20s", 20 * time.Second, []shape{{9, 6}}},
		// Longer than half the target: 5 x 12s, a little over 60s of work
		// (4 workers by the work alone, one of them running two actions:
		// 24s); each needs a core of its own, and the signal asks for 5.
		{"long-12s/target-20s", 20 * time.Second, []shape{{12, 5}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var needed int
			var took time.Duration
			for b.Loop() {
				needed, took = drainOnce(b, c.target, func(yield func(secs int) bool) {
					for _, s := range c.queue {
						for range s.n {
							if !yield(s.secs) {
								return
							}
						}
					}
				})
			}
			b.ReportMetric(float64(needed), "workers-needed")
			b.ReportMetric(took.Seconds(), "drain-s")
			b.ReportMetric(c.target.Seconds(), "target-s")
		})
	}
}

// drainOnce runs one measurement: the workers the signal asked for at
// the start, and how long that many took to drain the queue.
func drainOnce(b *testing.B, target time.Duration, queue func(func(int) bool)) (int, time.Duration) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Default()
	cfg.Listen, cfg.HTTPListen, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", b.TempDir()
	cfg.Worker.Enabled = false
	cfg.Status.Refresh = 0
	cfg.Scheduler.Autoscaling.TargetDrain = config.Duration(target)
	srv, err := New(cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	conn, err := client.Dial(srv.GRPCAddr())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest {
		bs, _ := proto.Marshal(m)
		d := digest.Compute(digest.SHA256, bs)
		if err := blobstore.Put(ctx, cas, d, bs); err != nil {
			b.Fatal(err)
		}
		return d
	}
	// Each action its own input root, so none is deduplicated, and one
	// shape per duration (the same command).
	n := 0
	action := func(secs int) digest.Digest {
		n++
		file := put(&repb.Directory{})
		root := put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "d" + strconv.Itoa(n), Digest: file.Proto()}}})
		return put(&repb.Action{DoNotCache: true, InputRootDigest: root.Proto(),
			CommandDigest: put(&repb.Command{Arguments: []string{"sleep", strconv.Itoa(secs)}}).Proto()})
	}
	execute := func(a digest.Digest) error {
		resp, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: a.Proto()})
		if err == nil {
			err = client.CheckResponse(resp)
		}
		return err
	}
	startWorker := func(id string) (stop func()) {
		wc := config.Default().Worker
		wc.ID, wc.Cores, wc.WorkDir, wc.AcceptUnknownProperties = id, 1, filepath.Join(cfg.DataDir, id), true
		w, err := worker.New(conn, workerpb.NewWorkersClient(conn), WorkerConfig(wc, log))
		if err != nil {
			b.Fatal(err)
		}
		wctx, wcancel := context.WithCancel(ctx)
		wdone := make(chan struct{})
		go func() { w.Run(wctx); close(wdone) }()
		return func() { wcancel(); <-wdone }
	}

	// Warm the history: one run of each duration.
	seen := map[int]bool{}
	stopWarm := startWorker("warm")
	queue(func(secs int) bool {
		if !seen[secs] {
			seen[secs] = true
			if err := execute(action(secs)); err != nil {
				b.Fatalf("warming sleep %d: %v", secs, err)
			}
		}
		return true
	})
	stopWarm()

	// Queue the work, then read the signal.
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	queued := 0
	queue(func(secs int) bool {
		a := action(secs)
		queued++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := execute(a); err != nil {
				errs <- err
			}
		}()
		return true
	})
	for srv.Scheduler().Stats().Queued < queued {
		time.Sleep(10 * time.Millisecond)
	}
	needed := workersNeeded(b, "http://"+srv.HTTPAddr()+"/status/autoscaling")
	start := time.Now()
	var stops []func()
	for i := range needed {
		stops = append(stops, startWorker(fmt.Sprintf("w%d", i)))
	}
	wg.Wait()
	took := time.Since(start)
	for _, stop := range stops {
		stop()
	}
	select {
	case err := <-errs:
		b.Fatalf("an action failed: %v", err)
	default:
	}
	return needed, took
}

// workersNeeded reads the workers_needed of cohort "" at url.
func workersNeeded(b *testing.B, url string) int {
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Cohorts []struct {
			Cohort  string `json:"cohort"`
			Workers int    `json:"workers_needed"`
		} `json:"cohorts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		b.Fatal(err)
	}
	for _, c := range out.Cohorts {
		if c.Cohort == "" {
			return c.Workers
		}
	}
	b.Fatalf("%s has no cohort \"\"", url)
	return 0
}
