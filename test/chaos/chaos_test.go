package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/client"
)

// TestChaos runs the fault loop: the farm (see farm) under the load (see
// load) for -chaos.duration while the injector (see faultKinds) breaks it on
// a schedule drawn from -chaos.seed; without a seed it runs twice, with
// fixedSeed and with a random (printed) one. Every answer is checked as it
// arrives (load.check) and the whole run at the end (finalChecks): a broken
// check fails the test with the seed, the fault log and the first wrong
// answer.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the fault loop runs for minutes")
	}
	requireTools(t)
	seeds := []int64{*flagSeed}
	if *flagSeed == 0 {
		seeds = []int64{fixedSeed, 1 + rand.Int64N(1<<31)}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runChaos(t, seed, *flagDuration) })
	}
}

func runChaos(t *testing.T, seed int64, duration time.Duration) {
	t.Logf("chaos: seed %d for %v (replay: go test ./test/chaos -run Chaos -chaos.seed %d -chaos.duration %v)", seed, duration, seed, duration)
	dir, err := os.MkdirTemp(tmpRoot, fmt.Sprintf("seed-%d-", seed))
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("GANTRY_CHAOS_KEEP") == "1" {
			t.Logf("kept %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	counter := startRunCounter(t)
	setup := time.Now()
	f := startFarm(t, dir)
	t.Logf("the farm is up after %v: HAProxy %s, frontends %s and %s (via %s), leader %s",
		time.Since(setup).Round(time.Millisecond), f.lb.Addr, grpcAddr(f.fes[0]), grpcAddr(f.fes[1]), f.cut.Addr, f.leader().Name)

	marker := fmt.Sprintf("chaos-%d-%d", seed, time.Now().UnixNano())
	env := actionEnv{bash: bashPath(t), marker: marker, port: counter.Port}
	var conns []*grpc.ClientConn
	for i := 0; i < clients; i++ {
		conn, err := client.Dial(f.lb.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns = append(conns, conn)
	}
	rec := newRecorder(seed)
	bd := newBuilds(t, dir, f.lb.Addr, rec)
	l := newLoad(env, conns, seed, rec)
	smp := &sampler{procs: f.procs()}
	rest := smp.atRest()
	stopLoad, loadDone := make(chan struct{}), make(chan struct{})
	stopSampler, samplerDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(loadDone); l.run(stopLoad) }()
	buildsDone := make(chan struct{})
	go func() {
		defer close(buildsDone)
		if bd != nil {
			bd.run(stopLoad)
		}
	}()
	go func() { defer close(samplerDone); smp.run(stopSampler) }()
	defer func() {
		close(stopSampler)
		<-samplerDone
	}()

	in := &injector{f: f, rec: rec, r: rand.New(rand.NewPCG(uint64(seed), 0))}
	if err := in.loop(time.Now().Add(duration)); err != nil {
		rec.wrong(err.Error())
	}
	loopEnd := time.Now()
	close(stopLoad)
	in.drain(loadDone, loopEnd, opBound+time.Minute, "the load")
	in.drain(buildsDone, loopEnd, 2*buildBound+time.Minute, "the builds")
	t.Logf("the loop ended after %v; the load drained in %v", loopEnd.Sub(rec.start).Round(time.Second), time.Since(loopEnd).Round(time.Second))
	if rec.failed() {
		t.Fatal(rec.failure())
	}
	bd.check(duration)
	c := &finalCheck{f: f, l: l, b: bd, rec: rec, counter: counter, conn: conns[0], marker: marker}
	c.run()
	over, usage := smp.check()
	// Let the farm settle (calls finish, idle streams close) before it is
	// compared with the farm before the load.
	time.Sleep(restSettle)
	leaks, growthLine := growth(rest, smp.atRest())
	for _, lk := range leaks {
		path, err := smp.dumpGoroutines(lk.name)
		if err != nil {
			path = fmt.Sprintf("no goroutine dump: %v", err)
		}
		over = append(over, fmt.Sprintf("%s (its goroutines: %s)", lk.msg, path))
	}
	for _, o := range over {
		rec.wrong(o)
	}
	t.Logf("processes: %s", usage)
	t.Logf("at rest, before and after the run: %s", growthLine)
	t.Log(c.summary(duration))
	if rec.failed() {
		t.Fatal(rec.failure())
	}
}

// drain waits for done, supervising the nodes, for at most bound after
// loopEnd.
func (in *injector) drain(done <-chan struct{}, loopEnd time.Time, bound time.Duration, what string) {
	for {
		select {
		case <-done:
			return
		case <-time.After(250 * time.Millisecond):
			if err := in.supervise(); err != nil {
				in.rec.wrong(err.Error())
			}
			if time.Since(loopEnd) > bound {
				in.rec.wrong(fmt.Sprintf("%s did not end within %v of the loop's end", what, bound))
				<-done
				return
			}
		}
	}
}

// summaryLine formats counts by key, sorted.
func summaryLine[K comparable](m map[K]int) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%v: %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
