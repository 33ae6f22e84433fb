package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server/servertest"
)

// TestScaleWorkersRunEveryActionOnce queues actions of several tenants
// and invocations on a real Gantry as open Execute streams (some dropped
// and followed with WaitExecution), holds the scale workers back until
// all are queued, and checks that they run every action once, and that
// the scheduler's hand-off histogram, read from /metrics, counts each
// lease.
func TestScaleWorkersRunEveryActionOnce(t *testing.T) {
	// No embedded worker: the scale workers must run every action.
	srv, conn := servertest.StartWith(t, func(c *config.Config) { c.Worker.Enabled = false; c.HTTPListen = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plan := &ScalePlan{Tenants: 2, Invocations: 5, Queued: 60, Zipf: 1.2, MeanSleep: time.Millisecond, Drop: 0.3, Seed: 7}
	items := scaleItems(plan, "test")
	if err := uploadItems(ctx, conn, 4<<20, items); err != nil {
		t.Fatal(err)
	}

	gateR, gateW := io.Pipe()
	statusR, statusW := io.Pipe()
	var out bytes.Buffer
	served := make(chan error, 1)
	dial := func(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		return client.Dial(addr, opts...)
	}
	go func() {
		served <- ServeScaleWorkers(ctx, dial, srv.GRPCAddr(), "w", 0, 6, 2, gateR, &out, statusW)
		statusW.Close()
	}()
	if line, err := bufio.NewReader(statusR).ReadString('\n'); err != nil || line != "registered\n" {
		t.Fatalf("the workers did not register: %q, %v", line, err)
	}
	go io.Copy(io.Discard, statusR)

	follow := make(chan struct{})
	var queued, done sync.WaitGroup
	queued.Add(len(items))
	done.Add(len(items))
	sem := make(chan struct{}, 8)
	for _, it := range items {
		go func() { defer done.Done(); it.execute(ctx, conn, sem, queued.Done, follow) }()
	}
	queued.Wait()
	handoffsBefore := scrapeHandoffs(ctx, srv.HTTPAddr())
	t0 := time.Now()
	io.WriteString(gateW, "go\n")
	close(follow)
	done.Wait()
	gateW.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	var wr scaleWorkersReport
	if err := json.Unmarshal(out.Bytes(), &wr); err != nil {
		t.Fatalf("the workers' report %q: %v", out.String(), err)
	}
	probe := &scaleItem{id: "none", err: context.Canceled} // no probe in this test
	rep := &ScaleReport{Queued: len(items)}
	rep.summarize(items, probe, nil, []*scaleWorkersReport{&wr}, t0, 0)
	rep.summarizeHandoffs(handoffsBefore, scrapeHandoffs(ctx, srv.HTTPAddr()))
	if rep.Completed != len(items) || rep.Errors != 0 {
		t.Fatalf("%d of %d completed, %d failed: %s", rep.Completed, len(items), rep.Errors, rep.FirstError)
	}
	// (wr.Accepted may be short of them: the answer to the Poll that
	// carried the last results is cut off when the workers stop.)
	if rep.LeasedTwice != 0 || rep.NeverLeased != 0 || wr.Refused != 0 {
		t.Errorf("leased twice %d, never leased %d, results refused %d", rep.LeasedTwice, rep.NeverLeased, wr.Refused)
	}
	if rep.GapN == 0 {
		t.Error("no slot-free-to-lease gap was measured")
	}
	if rep.ServerHandoffN != len(items) || rep.ServerHandoffMaxMs == 0 {
		t.Errorf("the scheduler's histogram counted %d hand-offs (max %gms), want one per action: %d", rep.ServerHandoffN, rep.ServerHandoffMaxMs, len(items))
	}
}

// TestScaleReportCatchesDoubleLeases checks the exactly-once verdict.
func TestScaleReportCatchesDoubleLeases(t *testing.T) {
	now := time.Now()
	items := []*scaleItem{{id: "a", doneAt: now}, {id: "b", doneAt: now}, {id: "c", doneAt: now}}
	leases := []scaleLease{{ID: "a", AtNs: 1}, {ID: "a", AtNs: 2}, {ID: "b", AtNs: 3}}
	rep := &ScaleReport{Queued: 3}
	rep.summarize(items, &scaleItem{id: "p", doneAt: now}, nil, []*scaleWorkersReport{{Leases: leases}}, now.Add(-time.Second), 0)
	if rep.LeasedTwice != 1 || rep.NeverLeased != 2 { // c, and the probe
		t.Fatalf("leased twice %d, never leased %d; want 1 and 2", rep.LeasedTwice, rep.NeverLeased)
	}
	if err := rep.check(); err == nil || !strings.Contains(err.Error(), "exactly-once") {
		t.Errorf("check() = %v; want an exactly-once failure", err)
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{5, 5, 5}, 1}, {[]float64{1, 0, 0, 0}, 0.25}, {nil, 0}} {
		if got := jain(c.xs); got != c.want {
			t.Errorf("jain(%v) = %g; want %g", c.xs, got, c.want)
		}
	}
}

func TestScalePlanValidate(t *testing.T) {
	ok := ScalePlan{Server: "x:1", Workers: 4, Slots: 1, WorkerProcs: 2, Tenants: 2, Invocations: 4, Queued: 10, Zipf: 1.2, Conns: 1, Timeout: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*ScalePlan){
		"--worker-procs": func(p *ScalePlan) { p.WorkerProcs = 5 },
		"--zipf":         func(p *ScalePlan) { p.Zipf = 1 },
		"--drop":         func(p *ScalePlan) { p.Drop = 2 },
		"--invocations":  func(p *ScalePlan) { p.Invocations = 1 },
		"--kill-after":   func(p *ScalePlan) { p.KillAfter = time.Second }, // without --server-pid
		"--standby-http": func(p *ScalePlan) { p.StandbyHTTP = "x:2" },     // without --kill-after
		"--kill-profile": func(p *ScalePlan) { p.KillAfter, p.ServerPID, p.HTTP, p.KillProfile = time.Second, 1, "x:3", "f" },
	} {
		p := ok
		mod(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Validate() = %v; want an error naming it", name, err)
		}
	}
}

// FuzzScaleAction feeds arbitrary Command bytes to the worker's reading of
// an assignment: it returns an error or an id, never panics.
func FuzzScaleAction(f *testing.F) {
	good, _ := proto.Marshal(&repb.Command{EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: benchIDVar, Value: "x"}, {Name: scaleSleepVar, Value: "3"}}})
	f.Add(good)
	f.Add([]byte("\x12\x05"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, sleep, err := scaleAction(&workerpb.Assignment{Command: b})
		if err == nil && (id == "" || sleep < 0) {
			t.Fatalf("accepted %q with id %q sleep %v", b, id, sleep)
		}
	})
}

// The kill's figures: a worker is back at its first lease taken once the
// new scheduler served, a client at its first message after its stream
// broke; an action without a result at the kill was open.
func TestScaleReportKill(t *testing.T) {
	at := time.Now()
	back := at.Add(2 * time.Second)
	k := &scaleKill{plan: &ScalePlan{StandbyHTTP: "x:1"}, probe: &scaleItem{}, at: at, back: back, execute: at.Add(3 * time.Second), restored: 2}
	items := []*scaleItem{
		{id: "done-before", doneAt: at.Add(-time.Second)},
		{id: "broken", doneAt: at.Add(5 * time.Second), brokeAt: at, backAt: at.Add(4 * time.Second)},
		{id: "still-broken", brokeAt: at},
	}
	ns := func(d time.Duration) int64 { return at.Add(d).UnixNano() }
	leases := []scaleLease{
		{ID: "a", Worker: "w1", AtNs: ns(time.Second)}, // from the killed scheduler's time
		{ID: "b", Worker: "w1", AtNs: ns(3 * time.Second)},
		{ID: "c", Worker: "w1", AtNs: ns(2500 * time.Millisecond)},
		{ID: "d", Worker: "w2", AtNs: ns(6 * time.Second)},
	}
	rep := &ScaleReport{Workers: 3}
	rep.summarizeKill(k, items, []*scaleWorkersReport{{Leases: leases}})
	if rep.Kill != "fail-over" || rep.OpenAtKill != 2 || rep.RestoredActions != 2 {
		t.Errorf("kill %q, open at the kill %d, restored %g; want fail-over, 2, 2", rep.Kill, rep.OpenAtKill, rep.RestoredActions)
	}
	if rep.BackMs != 2000 || rep.ExecuteMs != 3000 {
		t.Errorf("serving after %gms, Execute after %gms; want 2000 and 3000", rep.BackMs, rep.ExecuteMs)
	}
	if rep.ClientsBroken != 2 || rep.ClientsBack != 1 || rep.ClientsBackMs != 4000 {
		t.Errorf("clients broken %d, back %d after %gms; want 2, 1, 4000", rep.ClientsBroken, rep.ClientsBack, rep.ClientsBackMs)
	}
	if rep.WorkersBack != 2 || rep.WorkersBackMaxMs != 6000 {
		t.Errorf("workers back %d, the last after %gms; want 2 (w3 never), 6000", rep.WorkersBack, rep.WorkersBackMaxMs)
	}
	rep.KillProbeError = "boom"
	if err := rep.check(); err == nil || !strings.Contains(err.Error(), "after the kill") {
		t.Errorf("check() = %v; want the failed Execute after the kill", err)
	}
}

// TestHandoffQuantiles checks the histogram arithmetic of the
// server-side dispatch figures on a known exposition.
func TestHandoffQuantiles(t *testing.T) {
	text := func(counts ...int) []byte {
		var b strings.Builder
		for i, le := range []string{"0.0001", "0.001", "0.01", "+Inf"} {
			fmt.Fprintf(&b, "gantry_scheduler_handoff_seconds_bucket{le=%q} %d\n", le, counts[i])
		}
		return []byte(b.String())
	}
	before := parseHistogram(text(10, 10, 10, 10), "gantry_scheduler_handoff_seconds")
	// 100 more: 50 up to 0.1 ms, 49 in (0.1, 1] ms, 1 in (1, 10] ms.
	h := parseHistogram(text(60, 109, 110, 110), "gantry_scheduler_handoff_seconds").since(before)
	if n := h.count(); n != 100 {
		t.Fatalf("count %g, want 100", n)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 0.0001}, {0.99, 0.001}, {0.995, 0.0055}} {
		if got := h.quantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("quantile(%g) = %g, want %g", c.q, got, c.want)
		}
	}
	if got := h.maxBound(); got != 0.01 {
		t.Errorf("max bound %g, want 0.01", got)
	}
	labelled := parseHistogram([]byte(`x_bucket{backend="embedded",le="0.5"} 3`+"\n"+`x_bucket{backend="embedded",le="+Inf"} 4`+"\n"), "x")
	if n, q := labelled.count(), labelled.quantile(0.5); n != 4 || q != 0.5*2/3 {
		t.Errorf("a labelled histogram: count %g, median %g", n, q)
	}
	if got := parseHistogram(text(0, 0, 1, 2), "gantry_scheduler_handoff_seconds").maxBound(); !math.IsInf(got, 1) {
		t.Errorf("max bound with a sample in +Inf: %g", got)
	}
}
