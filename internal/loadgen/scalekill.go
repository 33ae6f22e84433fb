package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

// killPollInterval is how often the recovery is looked at after the kill.
const killPollInterval = 10 * time.Millisecond

// scaleKill is the kill of a scale run and what was seen of the
// recovery: the server (or the leading scheduler) killed with SIGKILL
// mid-drain, and then when a scheduler served again (the standby led, or
// the restarted server answered /healthz), when a fresh Execute was
// answered, and the operations the new scheduler held.
type scaleKill struct {
	plan *ScalePlan
	// probe is a fresh action, uploaded before the kill, sent after it
	// on conn.
	probe *scaleItem
	conn  grpc.ClientConnInterface

	at, back, execute time.Time
	// restored is what the new scheduler held when it served: queued
	// plus leased actions (-1: not read).
	restored float64
	err      error
	done     chan struct{}
}

// killFailover reports whether the kill is a fail-over to a standby.
func (p *ScalePlan) killFailover() bool { return p.StandbyHTTP != "" }

// checkRoles checks before the kill that --http leads and --standby-http
// stands by: killing a standby would measure nothing.
func (k *scaleKill) checkRoles(ctx context.Context) error {
	if !k.plan.killFailover() {
		return nil
	}
	if h, _ := healthz(ctx, k.plan.HTTP); !strings.Contains(h, "leader") {
		return fmt.Errorf("--http %s does not lead (its /healthz: %q): give the leading scheduler's HTTP address and process id, and the standby's HTTP address as --standby-http", k.plan.HTTP, h)
	}
	if h, _ := healthz(ctx, k.plan.StandbyHTTP); !strings.Contains(h, "standby") {
		return fmt.Errorf("--standby-http %s does not stand by (its /healthz: %q): give a second `gantry serve --role scheduler` on the same PostgreSQL", k.plan.StandbyHTTP, h)
	}
	return nil
}

// run kills the server and follows the recovery until a scheduler serves
// and the probe's Execute was answered; the probe then runs on to its
// result. done closes when both were seen (or ctx ended); wg is done
// when the probe has its result.
func (k *scaleKill) run(ctx context.Context, wg *sync.WaitGroup) {
	k.done = make(chan struct{})
	var profWG sync.WaitGroup
	if k.plan.KillProfile != "" {
		profWG.Add(1)
		go func() {
			defer profWG.Done()
			if err := saveProfile(ctx, k.plan.StandbyHTTP, "profile?seconds=30", k.plan.KillProfile); err != nil {
				k.err = err
			}
		}()
		time.Sleep(50 * time.Millisecond) // the profile starts before the kill
	}
	if err := syscall.Kill(k.plan.ServerPID, syscall.SIGKILL); err != nil {
		k.err = fmt.Errorf("killing the server (--server-pid %d): %w", k.plan.ServerPID, err)
		close(k.done)
		wg.Done()
		return
	}
	k.at = time.Now()
	answered := make(chan time.Time, 1)
	go func() {
		defer wg.Done()
		k.probe.execute(ctx, k.conn, make(chan struct{}, 1), func() { answered <- time.Now() }, nil)
	}()
	go func() {
		defer close(k.done)
		k.back, k.restored = k.waitBack(ctx)
		select {
		case k.execute = <-answered:
		case <-ctx.Done():
		}
		profWG.Wait()
	}()
}

// waitBack waits until a scheduler serves again: the standby's /healthz
// says it leads, or the restarted server's /healthz answers. It returns
// when, and the queued and leased actions the scheduler then holds.
func (k *scaleKill) waitBack(ctx context.Context) (time.Time, float64) {
	addr := k.plan.HTTP
	if k.plan.killFailover() {
		addr = k.plan.StandbyHTTP
	}
	for {
		h, err := healthz(ctx, addr)
		if err == nil && (!k.plan.killFailover() || strings.Contains(h, "leader")) {
			at := time.Now()
			restored := -1.0
			if body, err := get(ctx, &http.Client{Timeout: time.Minute}, "http://"+addr+"/metrics"); err == nil {
				q, l := metricValue(body, "gantry_scheduler_queued_actions"), metricValue(body, "gantry_scheduler_leased_actions")
				if q >= 0 && l >= 0 {
					restored = q + l
				}
			}
			return at, restored
		}
		if !sleepCtx(ctx, killPollInterval) {
			return time.Time{}, -1
		}
	}
}

// healthz is the body of the server's /healthz (an error unless 200).
func healthz(ctx context.Context, httpAddr string) (string, error) {
	b, err := get(ctx, &http.Client{Timeout: 2 * time.Second}, "http://"+httpAddr+"/healthz")
	return string(b), err
}

// summarizeKill fills in the report's kill figures from what the kill
// saw, the clients' items and the workers' leases.
func (r *ScaleReport) summarizeKill(k *scaleKill, items []*scaleItem, reps []*scaleWorkersReport) {
	r.Kill = "restart"
	if k.plan.killFailover() {
		r.Kill = "fail-over"
	}
	if k.err != nil {
		r.KillError = k.err.Error()
	}
	if k.probe.err != nil {
		r.KillProbeError = k.probe.err.Error()
	}
	if k.at.IsZero() {
		return
	}
	since := func(t time.Time) float64 {
		if t.IsZero() {
			return -1
		}
		return roundTo(ms(t.Sub(k.at)), 1)
	}
	r.RestoredActions = k.restored
	r.BackMs, r.ExecuteMs = since(k.back), since(k.execute)
	var lastBack time.Time
	for _, it := range items {
		if it.doneAt.IsZero() || it.doneAt.After(k.at) {
			r.OpenAtKill++
		}
		if !it.brokeAt.IsZero() {
			r.ClientsBroken++
			if !it.backAt.IsZero() {
				r.ClientsBack++
				lastBack = later(lastBack, it.backAt)
			}
		}
	}
	r.ClientsBackMs = since(lastBack)
	if k.back.IsZero() {
		return
	}
	// A worker is back at its first lease taken from the new scheduler.
	first := map[string]int64{}
	for _, rp := range reps {
		for _, l := range rp.Leases {
			if l.AtNs < k.back.UnixNano() {
				continue
			}
			if at, ok := first[l.Worker]; !ok || l.AtNs < at {
				first[l.Worker] = l.AtNs
			}
		}
	}
	var backs []time.Duration
	for _, at := range first {
		backs = append(backs, time.Duration(at-k.at.UnixNano()))
	}
	s := summarize(backs)
	r.WorkersBack, r.WorkersBackP50Ms, r.WorkersBackMaxMs = s.n, roundTo(ms(s.p50), 1), roundTo(ms(s.max), 1)
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
