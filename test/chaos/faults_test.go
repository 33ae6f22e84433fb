package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/testutil/cluster"
)

// faultKinds are the faults the loop injects, each on a target it picks.
var faultKinds = []string{
	"kill-frontend", // kill -9 of a frontend, started again after 0-3 s
	"kill-leader",   // kill -9 of the leading scheduler, started again (as a standby) after 0-3 s
	"kill-standby",  // kill -9 of the standby scheduler, started again after 0-3 s
	"kill-worker",   // kill -9 of a worker process (its actions run on), started again after 0-3 s
	"stop-worker",   // SIGSTOP of a worker for heartbeat_timeout + 1-4 s, then SIGCONT
	"stop-minio",    // MinIO stopped (SIGTERM or SIGKILL) for 2-8 s
	"stop-postgres", // PostgreSQL stopped (fast shutdown or SIGKILL) for 2-8 s
	"cut-frontend",  // the network between HAProxy (so clients and workers) and fe2 cut for 2-10 s
	"fill-disk",     // the small-disk worker's disk filled to below min_free_disk for 3-8 s
}

// active is one fault in progress: its repair and how long it lasts.
type active struct {
	ev     *faultEvent
	hold   time.Duration
	repair func() error
}

// injector picks faults with a seeded generator: the same seed gives the
// same schedule of kinds, targets and durations.
type injector struct {
	f   *farm
	rec *recorder
	r   *rand.Rand
	// pgDown is set while PostgreSQL is stopped: a scheduler started then
	// would not become healthy, so the supervisor waits.
	pgDown bool
	// s3Down is set while MinIO is stopped: a frontend started then waits
	// for its bucket (storage.s3.start_wait) before it serves, and MinIO
	// comes back only after this round's other repairs, so a frontend
	// killed meanwhile is started once MinIO is back, from waitingFEs. The
	// same holds while PostgreSQL is down (pgDown): a frontend started
	// then waits for it (scheduler.store.start_wait), and Start waits for
	// a healthy node.
	s3Down     bool
	waitingFEs []*cluster.Proc
}

// loop injects faults until the deadline or the first wrong answer: pauses
// of 2-10 s, then one fault, or two at once in a third of the rounds. A
// repair that fails (a node that does not come back) is returned.
func (in *injector) loop(deadline time.Time) error {
	for time.Now().Before(deadline) {
		pause := time.Duration(2000+in.r.IntN(8000)) * time.Millisecond
		if err := in.wait(pause); err != nil {
			return err
		}
		if in.rec.failed() {
			return nil
		}
		n := 1
		if in.r.IntN(3) == 0 {
			n = 2
		}
		var now []active
		targets := map[string]bool{}
		for i := 0; i < n; i++ {
			kind := faultKinds[in.r.IntN(len(faultKinds))]
			a, ok, err := in.begin(kind, targets)
			if err != nil {
				return err
			}
			if ok {
				now = append(now, a)
			}
		}
		var longest time.Duration
		for _, a := range now {
			longest = max(longest, a.hold)
		}
		if err := in.wait(longest); err != nil {
			return err
		}
		for i := len(now) - 1; i >= 0; i-- {
			if err := now[i].repair(); err != nil {
				return fmt.Errorf("repairing %s of %s: %w", now[i].ev.kind, now[i].ev.target, err)
			}
			in.rec.end(now[i].ev)
		}
	}
	return in.supervise()
}

// wait waits for d (less at the first wrong answer), supervising the nodes.
func (in *injector) wait(d time.Duration) error {
	end := time.Now().Add(d)
	for {
		if err := in.supervise(); err != nil {
			return err
		}
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		select {
		case <-in.rec.stop:
			return nil
		case <-time.After(min(left, 250*time.Millisecond)):
		}
	}
}

// lostLeadership is what a scheduler says when it exits because it lost
// its PostgreSQL lock session: by design it stops, and its supervisor
// (systemd's Restart=, a Kubernetes pod) starts it again to stand by.
const lostLeadership = "this scheduler lost the leadership"

// supervise does what a process supervisor does for a scheduler that exited
// after losing the leadership: start it again (logged as a "restart" in the
// fault log). Any other node that exited by itself is an error.
func (in *injector) supervise() error {
	for _, p := range in.f.procs() {
		err := p.Crashed()
		if err == nil {
			continue
		}
		if !slices.Contains(in.f.scheds, p) || !strings.Contains(cluster.ReadTail(p.LogPath(), 4096), lostLeadership) {
			return err
		}
		if in.pgDown {
			continue
		}
		ev := in.rec.begin("restart", p.Name, "exited after losing the leadership; started again as a supervisor would")
		if err := p.Start(); err != nil {
			return err
		}
		in.rec.end(ev)
	}
	return nil
}

// holdFor is a random duration in [lo, hi] seconds.
func (in *injector) holdFor(lo, hi float64) time.Duration {
	return time.Duration((lo + in.r.Float64()*(hi-lo)) * float64(time.Second))
}

// begin starts a fault of kind on a target not in targets; ok is false when
// there is no such target (the fault is skipped, not logged).
func (in *injector) begin(kind string, targets map[string]bool) (a active, ok bool, err error) {
	f := in.f
	pick := func(ps []*cluster.Proc) *cluster.Proc {
		p := ps[in.r.IntN(len(ps))]
		if targets[p.Name] {
			return nil
		}
		return p
	}
	restartable := func(p *cluster.Proc, group bool) (active, bool, error) {
		if p == nil || targets[p.Name] {
			return active{}, false, nil
		}
		targets[p.Name] = true
		hold := in.holdFor(0, 3)
		ev := in.rec.begin(kind, p.Name, fmt.Sprintf("pid %d, down %.1fs", p.PID(), hold.Seconds()))
		if err := p.Kill9(group); err != nil {
			return active{}, false, err
		}
		return active{ev: ev, hold: hold, repair: p.Start}, true, nil
	}
	switch kind {
	case "kill-frontend":
		a, ok, err := restartable(pick(f.fes), true)
		if ok {
			start := a.repair
			p := a.ev.target
			a.repair = func() error {
				if !in.s3Down && !in.pgDown {
					return start()
				}
				a.ev.note += "; started again once MinIO and PostgreSQL were back"
				for _, fe := range f.fes {
					if fe.Name == p {
						in.waitingFEs = append(in.waitingFEs, fe)
					}
				}
				return nil
			}
		}
		return a, ok, err
	case "kill-leader", "kill-standby":
		l := f.leader()
		if l == nil {
			return active{}, false, nil
		}
		if kind == "kill-standby" {
			for _, s := range f.scheds {
				if s != l {
					l = s
				}
			}
			if !l.Running() {
				return active{}, false, nil
			}
		}
		return restartable(l, true)
	case "kill-worker":
		// What the worker holds is read just before the kill: its actions'
		// stage, for the fault log and the summary.
		p := pick(f.workers)
		var stage, detail string
		if p != nil && !targets[p.Name] {
			stage, detail = workerStage(p.HTTPAddr)
		}
		a, ok, err := restartable(p, false)
		if ok {
			a.ev.stage = stage
			a.ev.note += fmt.Sprintf("; %s (%s)", stage, detail)
		}
		return a, ok, err
	case "stop-worker":
		p := pick(f.workers)
		if p == nil {
			return active{}, false, nil
		}
		targets[p.Name] = true
		hold := heartbeatTimeout + in.holdFor(1, 4)
		ev := in.rec.begin(kind, p.Name, fmt.Sprintf("pid %d, %.1fs", p.PID(), hold.Seconds()))
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			return active{}, false, err
		}
		return active{ev: ev, hold: hold, repair: func() error { return p.Signal(syscall.SIGCONT) }}, true, nil
	case "stop-minio":
		if targets["minio"] {
			return active{}, false, nil
		}
		targets["minio"] = true
		kill := in.r.IntN(2) == 0
		hold := in.holdFor(2, 8)
		ev := in.rec.begin(kind, "minio", fmt.Sprintf("kill %v, %.1fs", kill, hold.Seconds()))
		if kill {
			f.s3.Kill()
		} else {
			f.s3.Stop()
		}
		in.s3Down = true
		return active{ev: ev, hold: hold, repair: func() error {
			f.s3.Restart()
			in.s3Down = false
			return in.startWaitingFEs()
		}}, true, nil
	case "stop-postgres":
		if targets["postgres"] {
			return active{}, false, nil
		}
		targets["postgres"] = true
		kill := in.r.IntN(2) == 0
		hold := in.holdFor(2, 8)
		ev := in.rec.begin(kind, "postgres", fmt.Sprintf("kill %v, %.1fs", kill, hold.Seconds()))
		f.pg.Stop(kill)
		in.pgDown = true
		return active{ev: ev, hold: hold, repair: func() error {
			f.pg.Restart()
			in.pgDown = false
			return in.startWaitingFEs()
		}}, true, nil
	case "cut-frontend":
		if targets["fe2"] || targets["net-fe2"] {
			return active{}, false, nil
		}
		targets["net-fe2"] = true
		hold := in.holdFor(2, 10)
		ev := in.rec.begin(kind, "fe2", fmt.Sprintf("%.1fs", hold.Seconds()))
		f.cut.Cut()
		return active{ev: ev, hold: hold, repair: f.cut.Restore}, true, nil
	case "fill-disk":
		if f.smallDisk == "" || targets["disk-w2"] {
			return active{}, false, nil
		}
		targets["disk-w2"] = true
		hold := in.holdFor(3, 8)
		path := filepath.Join(f.smallDisk, "filler")
		var st syscall.Statfs_t
		if err := syscall.Statfs(f.smallDisk, &st); err != nil {
			return active{}, false, err
		}
		free := int64(st.Bavail) * st.Bsize
		size := free - minFreeDisk/2
		ev := in.rec.begin(kind, "w2", fmt.Sprintf("%d MiB written, %.1fs", size>>20, hold.Seconds()))
		if size > 0 {
			if err := fill(path, size); err != nil {
				ev.note += fmt.Sprintf(" (fill: %v)", err)
			}
		}
		return active{ev: ev, hold: hold, repair: func() error {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				return err
			}
			return nil
		}}, true, nil
	}
	return active{}, false, fmt.Errorf("unknown fault kind %q", kind)
}

// startWaitingFEs starts the frontends killed while MinIO or PostgreSQL
// was down, once both are back.
func (in *injector) startWaitingFEs() error {
	if in.s3Down || in.pgDown {
		return nil
	}
	waiting := in.waitingFEs
	in.waitingFEs = nil
	for _, fe := range waiting {
		if err := fe.Start(); err != nil {
			return fmt.Errorf("%s, started again once MinIO and PostgreSQL were back: %w", fe.Name, err)
		}
	}
	return nil
}

// fill writes size bytes to a new file at path (a full disk stops it early).
func fill(path string, size int64) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	buf := make([]byte, 1<<20)
	for size > 0 {
		n := min(int64(len(buf)), size)
		if _, err := fh.Write(buf[:n]); err != nil {
			return err
		}
		size -= n
	}
	return nil
}
