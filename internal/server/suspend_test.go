package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// procState returns the state letter of /proc/<pid>/stat ('T': stopped),
// or 0 when the process is gone.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// signalStopped reports whether pid is stopped by a signal: in state T, or in
// an uninterruptible wait (D) with SIGSTOP pending, which it takes as the
// wait ends. The second is a shell that forked a command with vfork: it
// waits in D until the child execs, and when SIGSTOP reaches the process
// group in between, the child stops before its exec, so the shell stays
// in D, its stop pending, until SIGCONT continues the child (and discards
// the pending stop). Seen under load in CI.
func signalStopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	var state string
	var pending uint64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			state, _, _ = strings.Cut(v, " ")
		case "SigPnd", "ShdPnd":
			n, _ := strconv.ParseUint(v, 16, 64)
			pending |= n
		}
	}
	const sigstop = 1 << (19 - 1)
	return state == "T" || state == "D" && pending&sigstop != 0
}

// pollUntil polls cond every 10 ms until it holds or d passes.
func pollUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// readPid reads a pid file an action wrote, 0 until it is complete.
func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// With scheduler.preemption: suspend, a real worker with one core runs a
// flood action; a small action (min_quota 1) waits behind it in the
// worker's pipeline. After the pre-emption delay the flood action's
// process is stopped (state T) and the small one runs on its core; when
// the small one is done the flood action continues where it was and
// completes with all its output, in its first and only try. It was
// stopped for longer than the heartbeat timeout and than its own action
// timeout: neither counts the stopped time.
func TestSuspendPreemptionEndToEnd(t *testing.T) {
	f := startFarm(t, func(c *config.Config) {
		c.Worker.Cores = 1
		c.Scheduler.Labels = []config.LabelConfig{{Name: "linux", Properties: map[string]string{"OSFamily": "linux"}}}
		c.Scheduler.Cohorts = []config.CohortConfig{{Name: "x86", Labels: []string{"linux"}}}
		c.Scheduler.PreemptionDelay = config.Duration(300 * time.Millisecond)
		c.Scheduler.Preemption = "suspend"
		c.Scheduler.MaxSuspend = config.Duration(5 * time.Minute)
	})
	admin := adminpb.NewAdminClient(f.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := admin.PutQuota(ctx, &adminpb.PutQuotaRequest{InstanceName: "small", Cohort: "x86", MinQuota: 1}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		resp *repb.ExecuteResponse
		err  error
	}
	execute := func(instance string, cmd *repb.Command, timeout time.Duration) <-chan result {
		ch := make(chan result, 1)
		a := &repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto(), DoNotCache: true,
			Timeout: durationpb.New(timeout)}
		ad := f.put(a)
		go func() {
			resp, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{InstanceName: instance, ActionDigest: ad.Proto()})
			if err == nil {
				err = client.CheckResponse(resp)
			}
			ch <- result{resp, err}
		}()
		return ch
	}
	dir := t.TempDir()
	victimPid, victimGate := filepath.Join(dir, "victim.pid"), filepath.Join(dir, "victim.go")
	smallPid, smallGate := filepath.Join(dir, "small.pid"), filepath.Join(dir, "small.go")
	// The gate loops keep each action running until the test lets it end.
	// The flood action's timeout is shorter than its stop: suspended time
	// does not count.
	const victimTimeout, stopped = 3 * time.Second, 3500 * time.Millisecond
	victim := execute("flood", shCmd(fmt.Sprintf("echo before > out; echo $$ > %s; until [ -e %s ]; do sleep 0.02; done; echo after >> out", victimPid, victimGate), "out"), victimTimeout)
	var pid int
	pollUntil(t, 30*time.Second, "the flood action to start", func() bool { pid = readPid(victimPid); return pid != 0 })

	small := execute("small", shCmd(fmt.Sprintf("echo $$ > %s; until [ -e %s ]; do sleep 0.02; done; echo quick > out", smallPid, smallGate), "out"), time.Minute)
	// The small action starts on the core the stopped flood action lent.
	pollUntil(t, 30*time.Second, "the small action to start", func() bool { return readPid(smallPid) != 0 })
	// SIGSTOP takes effect once the process leaves an uninterruptible
	// system call (state D under load): poll, bounded, for the stop.
	pollUntil(t, 10*time.Second, "the flood action's process to be stopped (SIGSTOP) while the small one runs", func() bool { return signalStopped(pid) })
	if st := f.srv.Scheduler().Stats(); st.Suspended != 1 || st.Preemptions != 1 {
		t.Errorf("scheduler stats %+v, want 1 suspended action, 1 pre-emption", st)
	}
	// It stays stopped for longer than the heartbeat timeout (1 s) —
	// the worker's heartbeats keep its lease — and than its own timeout.
	for end := time.Now().Add(stopped); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if !signalStopped(pid) {
			t.Fatalf("the flood action's process is in state %q while suspended, want stopped", procState(pid))
		}
	}
	// Let the flood action end when it can: stopped, it cannot see it.
	if err := os.WriteFile(victimGate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !signalStopped(pid) {
		t.Fatalf("the flood action's process is in state %q, want still stopped", procState(pid))
	}
	if err := os.WriteFile(smallGate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-small
	if r.err != nil {
		t.Fatalf("small action: %v", r.err)
	}
	if got := f.read(r.resp.Result.OutputFiles[0].Digest); got != "quick\n" {
		t.Errorf("small output %q", got)
	}
	r = <-victim
	if r.err != nil {
		t.Fatalf("flood action after its resume: %v", r.err)
	}
	if got := f.read(r.resp.Result.OutputFiles[0].Digest); got != "before\nafter\n" {
		t.Errorf("flood output %q, want what it wrote before and after its suspension", got)
	}
	st := f.srv.Scheduler().Stats()
	if st.Suspended != 0 || st.SuspendExpired != 0 || st.Preemptions != 1 {
		t.Errorf("scheduler stats at the end %+v", st)
	}
	if m := f.srv.Scheduler().MetricsSnapshot(); m.WorkersLost != 0 || m.Retries != 0 {
		t.Errorf("%d leases lost, %d retries: a suspended action's lease must not time out", m.WorkersLost, m.Retries)
	}
	// It ran once: the same process, suspended and continued.
	if got := readPid(victimPid); got != pid {
		t.Errorf("the flood action ran again (pid %d, first %d)", got, pid)
	}
}

// In suspend mode, a flood that fills the worker's cores and its pipeline
// (so the small action waits in the queue): one running flood action is
// suspended and the actions waiting behind it are taken back; the small
// action runs on the lent core, and then the suspended action resumes.
func TestSuspendPreemptionForQueuedWork(t *testing.T) {
	f, admin, execute := quotaFarm(t, func(c *config.Config) {
		c.Scheduler.PreemptionDelay = config.Duration(300 * time.Millisecond)
		c.Scheduler.Preemption = "suspend"
	})
	var mu sync.Mutex
	suspended, resumed := 0, 0
	f.srv.Scheduler().OnEvent(func(e scheduler.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Kind == scheduler.EventPreempted && strings.HasSuffix(e.Reason, "(suspended)"):
			suspended++
		case e.Kind == scheduler.EventResumed:
			resumed++
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer startFlood(ctx, execute, 4)()
	pollUntil(t, 30*time.Second, "the flood to fill the worker", func() bool {
		st, err := admin.GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: "flood", Cohort: "x86"})
		return err == nil && st.Usage == 4
	})
	resp, err := execute(ctx, "small", shCmd("echo quick > out", "out"))
	if err != nil || client.CheckResponse(resp) != nil {
		t.Fatalf("small action: %v %v", err, client.CheckResponse(resp))
	}
	if got := f.read(resp.Result.OutputFiles[0].Digest); got != "quick\n" {
		t.Errorf("small output %q", got)
	}
	// The suspended flood action resumes: it is running again, not
	// cancelled, and all four are held or queued.
	pollUntil(t, 30*time.Second, "the suspended flood action to resume", func() bool {
		st := f.srv.Scheduler().Stats()
		q, err := admin.GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: "flood", Cohort: "x86"})
		return st.Suspended == 0 && err == nil && q.Usage+q.Queued == 4
	})
	mu.Lock()
	if suspended != 1 || resumed != 1 {
		t.Errorf("%d suspended, %d resumed; want 1 and 1", suspended, resumed)
	}
	mu.Unlock()
	if st := f.srv.Scheduler().Stats(); st.Preemptions < 1 || st.Preemptions > 3 || st.SuspendExpired != 0 {
		t.Errorf("stats %+v, want 1 to 3 pre-emptions (one suspended, the waiting ones taken back), none expired", st)
	}
}
