package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// crashKillAfter is how many actions must have completed (their outputs at Bazel)
	// before the test kills the server: a third of the build.
	crashKillAfter = 12
	// crashKillPointTimeout bounds the wait for that point.
	crashKillPointTimeout = 2 * time.Minute
	// crashBuildTimeout bounds each Bazel build of the crash workspace.
	crashBuildTimeout = 3 * time.Minute
	// crashRemoteRetries is --remote_retries: Bazel backs off exponentially from
	// 100 ms up to 5 s between attempts, so ten of them span about 25 s, enough for
	// the server to come back while the first build is still retrying.
	crashRemoteRetries = 10
	// crashKillWait bounds the wait for the killed server to be gone.
	crashKillWait = 10 * time.Second
	// crashIdleWindow is how long the restarted server of client_gone must stay idle
	// before the re-run: longer than scheduler.heartbeat_timeout (crashConfig), after
	// which a restored lease whose worker does not report it goes back to the queue.
	crashIdleWindow = 7 * time.Second
	// crashIdleTimeout bounds the wait for that.
	crashIdleTimeout = 90 * time.Second
	// crashRestartAttempts is how often a restart on the same ports is tried when the
	// old ports are still taken.
	crashRestartAttempts = 5
)

// crashConfig is the server's configuration: an embedded worker on two cores with a
// fixed id (so the restarted server's worker is the same worker), and a short
// heartbeat timeout, since a lease whose worker does not report it after the restart
// goes back to the queue after scheduler.heartbeat_timeout (20 s by default).
const crashConfig = `
scheduler:
  heartbeat_interval: 1s
  heartbeat_timeout: 5s
worker:
  enabled: true
  id: crash-worker
  cores: 2
`

// crashActions returns the actions of //... in testdata/bazel/crash (see its BUILD) by
// name, each with the content of its output NAME.txt.
func crashActions() map[string]string {
	want := map[string]string{}
	for i := 0; i < 24; i++ {
		name := fmt.Sprintf("leaf_%d", i)
		want[name] = name + "\n"
	}
	for _, chain := range []string{"a", "b", "c", "d"} {
		content := ""
		for i := 0; i < 4; i++ {
			name := fmt.Sprintf("chain_%s_%d", chain, i)
			content += name + "\n"
			want[name] = content
		}
	}
	return want
}

// crashScenario is one way the client meets the crash.
type crashScenario struct {
	name string
	// retries is --remote_retries.
	retries int
	// clientGone: the first build gives up at the kill (no retries) and ends before the
	// server comes back, so the restarted server meets its restored work alone; the
	// re-run comes only once that server has been idle for a while.
	clientGone bool
}

var crashScenarios = []crashScenario{
	{name: "retries", retries: crashRemoteRetries},
	{name: "client_gone", retries: 0, clientGone: true},
}

// TestCrash kills `gantry serve` with SIGKILL in the middle of a remote Bazel build and
// starts it again on the same ports and data directory. The build must complete with
// every output right, no action that had completed before the kill may run again, and
// the work the killed server held must not be lost.
//
// Each scenario (crashScenarios), for each Bazel client, on one workspace:
//
//  1. `bazel clean`, then Bazel builds //... of testdata/bazel/crash (40 genrules of
//     half a second each, 24 independent and 4 chains of 4, --jobs=16) with
//     --spawn_strategy=remote against a fresh server whose embedded worker has two
//     cores: at any moment a few actions run, many wait in the scheduler's queue, and
//     the chains are not all submitted. Every execution appends "start NAME PPID" to a
//     log file on the host (--action_env=GANTRY_CRASH_LOG; the embedded worker runs
//     actions unsandboxed on this machine) and "done NAME PPID" once its output is
//     written. PPID is the server process whose embedded worker started it.
//  2. Once crashKillAfter actions have completed and at least one more has started,
//     the test kills the server's process group with SIGKILL (the actions run in
//     their own process groups, so, as after a real `kill -9`, they run on orphaned
//     until the next server's embedded worker, on the same work dir, kills them at
//     its start).
//  3. retries: `gantry serve` starts again at once with the same --listen,
//     --http-listen, --data-dir and configuration, while Bazel (--remote_retries=10)
//     is still retrying; the first build rides through the restart or gives up.
//     client_gone: Bazel (--remote_retries=0) gives up at the kill; after it exited
//     the server starts again and the test waits until it has had no queued or leased
//     action and the log has not grown for crashIdleWindow.
//  4. The same bazel command runs again and must exit 0 with every output right.
//  5. `bazel clean` and the same command once more: every action must be a remote
//     cache hit, and the log must not grow.
//
// The rules checked on the log (each execution is attributed to the server that ran
// it by its PPID):
//
//   - "Completed before the kill", exactly: an action whose output file NAME.txt was
//     present under bazel-bin when the test looked, immediately before sending
//     SIGKILL. Bazel downloads an action's outputs only after the server answered its
//     Execute with the finished result, and moves them into bazel-bin only once all
//     are downloaded; so a present output means the server had finished the action
//     and told the client. Such an action must have been executed exactly once, by the
//     killed server, and never by the restarted one (the issue's "no action executed
//     twice that had already completed").
//   - An action the killed server never started (queued in it, or not yet submitted)
//     must be executed exactly once, by the restarted server: restored queued work and
//     the client's Execute must meet in one execution.
//   - An action the killed server started without Bazel having its result at the kill
//     (running, or finished on the worker with the result on its way) may run again
//     on the restarted server; that is reported, not failed, except:
//   - client_gone: no action the killed server had started may be executed during the
//     re-run. The restarted server restores the leases of the killed one and runs that
//     work again by itself (or already has its result), before the client comes back;
//     and the re-run must report as many remote cache hits as there are actions the
//     restarted server ran on its own.
func TestCrash(t *testing.T) {
	forEachBazel(t, func(t *testing.T, c *bazelClient) {
		w := newCrashWorkspace(t, c)
		for _, sc := range crashScenarios {
			t.Run(sc.name, func(t *testing.T) {
				// The workspace's Bazel server outlives the scenarios; each one
				// drives it with its own *testing.T.
				sw := *w
				sw.t = t
				defer func() { w.Invocations = sw.Invocations }()
				runCrashScenario(t, &sw, sc)
			})
		}
	})
}

func runCrashScenario(t *testing.T, w *bazelWorkspace, sc crashScenario) {
	started := time.Now()
	cfgDir := testDir(t, "crash-config")
	cfg := writeFile(t, filepath.Join(cfgDir, "gantry.yaml"), crashConfig)
	// A log path of its own per scenario also gives the scenario's actions their own
	// digests (it is in their environment).
	logPath := filepath.Join(cfgDir, "actions.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	srv := newCrashServer(t, "--config", cfg)
	first := srv.start()

	args := []string{
		"//...",
		"--remote_executor=grpc://" + srv.GRPCAddr,
		"--spawn_strategy=remote",
		"--genrule_strategy=remote",
		"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
		"--remote_retries=" + itoa(sc.retries),
		"--action_env=GANTRY_CRASH_LOG=" + logPath,
		"--jobs=16",
	}
	want := crashActions()

	// 1. A clean output tree (the previous scenario's outputs must not count as
	// completed), then the first build, in the background.
	w.mustRun("clean")
	build1 := &backgroundBuild{done: make(chan struct{})}
	go func() {
		defer close(build1.done)
		build1.res = w.runWithTimeout(crashBuildTimeout, "build", args...)
	}()
	// Runs after the restarted server stopped: a test that failed early still waits
	// for its build.
	t.Cleanup(func() {
		select {
		case <-build1.done:
		case <-time.After(crashBuildTimeout + time.Minute):
			t.Errorf("the first build did not end within %v", crashBuildTimeout+time.Minute)
		}
	})

	// 2. Wait for the kill point, take stock, kill.
	buildStart := time.Now()
	var atKill crashLog
	var completed map[string]bool
	deadline := time.Now().Add(crashKillPointTimeout)
	for {
		select {
		case <-build1.done:
			t.Fatalf("the build ended (%s) before %d actions had completed with another one started: "+
				"nothing to crash; make the actions of testdata/bazel/crash slower (crash.bzl)",
				build1.describe(), crashKillAfter)
		default:
		}
		// The log first, then the outputs: an action whose output is present has its
		// "start" line in this log or in a later one.
		atKill = readCrashLog(t, logPath)
		completed = presentOutputs(w, want)
		if len(completed) >= crashKillAfter && len(atKill.inFlight(completed)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d actions completed (%d started), want %d completed and one more started before the kill",
				crashKillPointTimeout, len(completed), len(atKill.Starts), crashKillAfter)
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.kill9(t)
	killedAt := time.Now()
	inFlight := atKill.inFlight(completed)
	t.Logf("SIGKILL %v into the build: %d of %d actions completed, %d started without a result at Bazel %v, %d not started",
		killedAt.Sub(buildStart).Round(time.Millisecond), len(completed), len(want), len(inFlight), inFlight,
		len(want)-len(completed)-len(inFlight))

	waitBuild1 := func() {
		t.Helper()
		select {
		case <-build1.done:
		case <-time.After(crashBuildTimeout + time.Minute):
			t.Fatalf("the first build did not end within %v", crashBuildTimeout+time.Minute)
		}
		if build1.res == nil {
			t.Fatalf("the first build could not run (see above)")
		}
		if build1.res.ExitCode == 0 {
			t.Logf("the first build completed: %s", build1.describe())
		} else {
			t.Logf("the first build failed (%s); its errors:\n%s", build1.describe(), errorLines(build1.res.Output))
		}
	}

	// 3. Restart on the same ports and data directory.
	var beforeRerun crashLog
	var second *crashProc
	if sc.clientGone {
		waitBuild1()
		if build1.res.ExitCode == 0 {
			t.Errorf("the first build completed although the server was killed under it with --remote_retries=0")
		}
		restartAt := time.Now()
		second = srv.start()
		t.Logf("gantry serving again %v after the kill, %v after the client gave up",
			time.Since(killedAt).Round(time.Millisecond), time.Since(restartAt).Round(time.Millisecond))
		second.waitIdle(t, logPath)
		beforeRerun = readCrashLog(t, logPath)
	} else {
		second = srv.start()
		t.Logf("gantry serving again %v after the kill", time.Since(killedAt).Round(time.Millisecond))
		waitBuild1()
	}

	// 4. The re-run must succeed.
	rerun := w.runWithTimeout(crashBuildTimeout, "build", args...)
	if rerun.ExitCode != 0 {
		t.Errorf("re-running the build after the restart: exit code %d%s, want 0; output:\n%s",
			rerun.ExitCode, exitCodeHint(rerun.ExitCode), rerun.Output)
	}
	checkCrashOutputs(t, w, want)

	// The orphaned actions of the killed server (half a second each) have
	// written their "done" lines by now, or were killed as leftovers when the
	// next server's worker started: either way the log no longer changes.
	final := readCrashLog(t, logPath)
	e := crashExecutions{
		final: final, completed: completed, want: want,
		firstPID: first.cmd.Process.Pid, secondPID: second.cmd.Process.Pid,
	}
	if sc.clientGone {
		e.beforeRerun = &beforeRerun
	}
	e.check(t)
	if sc.clientGone && rerun.ExitCode == 0 {
		alone := e.ranAlone()
		if s := summaryOf(t, rerun); s.Count(kindRemoteCacheHit) < len(alone) {
			t.Errorf("the re-run had %d remote cache hits, want at least %d: the actions the restarted server ran before "+
				"the client came back %v: %s", s.Count(kindRemoteCacheHit), len(alone), alone, s.Line)
		}
	}

	// 5. From a clean output tree, everything comes from the action cache.
	w.mustRun("clean")
	before := len(final.Lines)
	res := w.runWithTimeout(crashBuildTimeout, "build", args...)
	if res.ExitCode != 0 {
		t.Errorf("building after bazel clean: exit code %d%s, want 0; output:\n%s",
			res.ExitCode, exitCodeHint(res.ExitCode), res.Output)
	} else {
		expectAllCacheHits(t, "build after the restart and bazel clean", summaryOf(t, res), len(want))
	}
	checkCrashOutputs(t, w, want)
	if after := readCrashLog(t, logPath); len(after.Lines) != before {
		t.Errorf("the build after bazel clean executed actions (the log grew by %v), want every result from the ActionCache",
			after.Lines[before:])
	}
	t.Logf("%s/%s: crash scenario took %v", w.Client.Name, sc.name, time.Since(started).Round(time.Millisecond))
}

// crashExecutions is what the log says about the executions of one scenario.
type crashExecutions struct {
	final     crashLog
	completed map[string]bool // completed before the kill
	want      map[string]string
	firstPID  int // the killed server
	secondPID int // the restarted server
	// beforeRerun, for client_gone, is the log when the re-run started.
	beforeRerun *crashLog
}

// ranAlone returns the actions the restarted server ran before the re-run.
func (e crashExecutions) ranAlone() []string {
	var out []string
	if e.beforeRerun == nil {
		return nil
	}
	for _, name := range sortedKeys(e.want) {
		if e.beforeRerun.StartsBy[name][e.secondPID] > 0 {
			out = append(out, name)
		}
	}
	return out
}

// check applies the rules of TestCrash.
func (e crashExecutions) check(t *testing.T) {
	t.Helper()
	var again []string
	total := 0
	for _, name := range sortedKeys(e.want) {
		byFirst, bySecond := e.final.StartsBy[name][e.firstPID], e.final.StartsBy[name][e.secondPID]
		n := e.final.Starts[name]
		total += n
		duringRerun := 0
		if e.beforeRerun != nil {
			duringRerun = bySecond - e.beforeRerun.StartsBy[name][e.secondPID]
		}
		switch {
		case n == 0:
			t.Errorf("action %s never logged a start, yet its output exists: was it built remotely, with --action_env=GANTRY_CRASH_LOG?", name)
			continue
		case byFirst+bySecond != n:
			t.Errorf("action %s: %d of its %d executions were started by neither gantry process (pids %d, %d): %v; "+
				"the log cannot tell which server ran them", name, n-byFirst-bySecond, n, e.firstPID, e.secondPID, e.final.StartsBy[name])
		case e.completed[name] && (n != 1 || bySecond != 0):
			t.Errorf("action %s had completed before the kill (its output was at Bazel, so gantry had returned its result) "+
				"but was executed %d times, %d of them by the restarted server: a restarted gantry must answer a finished "+
				"action from its restored operation or the ActionCache, not run it again", name, n, bySecond)
		case byFirst == 0 && bySecond != 1:
			t.Errorf("action %s had not started before the kill but the restarted server executed it %d times, want once: "+
				"restored queued work and the client's Execute must meet in one execution", name, bySecond)
		case byFirst > 0 && duringRerun > 0:
			t.Errorf("action %s was running on the killed server, and the client's re-run had it executed again (%d execution(s) during the re-run) "+
				"although the restarted server had been idle for %v before the re-run: the restarted server must restore the "+
				"killed one's lease and finish that work by itself (or serve its stored result), so that a client coming back "+
				"gets a cache hit", name, duringRerun, crashIdleWindow)
		case !e.completed[name] && byFirst > 0 && bySecond > 0:
			again = append(again, fmt.Sprintf("%s(%d+%d)", name, byFirst, bySecond))
		}
		if e.final.Dones[name] == 0 {
			t.Errorf("action %s never logged its end", name)
		}
	}
	alone := ""
	if e.beforeRerun != nil {
		alone = fmt.Sprintf("; run by the restarted server before the client came back: %v", e.ranAlone())
	}
	t.Logf("%d executions for %d actions; started by the killed server without a result at Bazel and run again by the "+
		"restarted one (allowed; executions by each): %v%s", total, len(e.want), again, alone)
}

// backgroundBuild is a Bazel build running in its own goroutine.
type backgroundBuild struct {
	done chan struct{} // closed when the build ended
	res  *bazelResult  // valid once done is closed; nil if Bazel could not run
}

func (b *backgroundBuild) describe() string {
	if b.res == nil {
		return "did not run"
	}
	s := fmt.Sprintf("exit %d%s after %v", b.res.ExitCode, exitCodeHint(b.res.ExitCode), b.res.Duration.Round(time.Millisecond))
	if sum, ok := lastProcessSummary(b.res.Output); ok {
		s += ", " + sum.Line
	}
	return s
}

// crashLog is the parsed log the crash workspace's actions append to, one
// "start NAME PPID" or "done NAME PPID" line per event.
type crashLog struct {
	Lines    []string
	Starts   map[string]int         // "start" lines per action
	StartsBy map[string]map[int]int // "start" lines per action and PPID
	Dones    map[string]int         // "done" lines per action
}

func readCrashLog(t *testing.T, path string) crashLog {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the action log: %v", err)
	}
	text := string(b)
	// A last line without its newline is still being appended; it is read next time.
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		text = text[:i+1]
	} else {
		text = ""
	}
	l := crashLog{Starts: map[string]int{}, StartsBy: map[string]map[int]int{}, Dones: map[string]int{}}
	for _, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		l.Lines = append(l.Lines, line)
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("action log line %q: want \"start|done NAME PPID\"", line)
		}
		ppid, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("action log line %q: %v", line, err)
		}
		switch f[0] {
		case "start":
			l.Starts[f[1]]++
			if l.StartsBy[f[1]] == nil {
				l.StartsBy[f[1]] = map[int]int{}
			}
			l.StartsBy[f[1]][ppid]++
		case "done":
			l.Dones[f[1]]++
		default:
			t.Fatalf("action log line %q: want \"start|done NAME PPID\"", line)
		}
	}
	return l
}

// inFlight returns the actions that started but are not among completed.
func (l crashLog) inFlight(completed map[string]bool) []string {
	var out []string
	for name, n := range l.Starts {
		if n > 0 && !completed[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// presentOutputs returns the actions whose output is in the workspace's bazel-bin.
func presentOutputs(w *bazelWorkspace, want map[string]string) map[string]bool {
	present := map[string]bool{}
	for name := range want {
		if _, err := os.Stat(filepath.Join(w.Dir, "bazel-bin", name+".txt")); err == nil {
			present[name] = true
		}
	}
	return present
}

// checkCrashOutputs checks every output of //... in bazel-bin.
func checkCrashOutputs(t *testing.T, w *bazelWorkspace, want map[string]string) {
	t.Helper()
	for _, name := range sortedKeys(want) {
		b, err := os.ReadFile(filepath.Join(w.Dir, "bazel-bin", name+".txt"))
		if err != nil {
			t.Errorf("output of %s: %v", name, err)
		} else if string(b) != want[name] {
			t.Errorf("bazel-bin/%s.txt = %q, want %q", name, b, want[name])
		}
	}
}

// checkRanOnceAcrossKill checks, from the action log final of a build that
// rode through kill ("the kill", "the kills"), that every action of want
// ran: one that had completed at the kill (atKill, completed) exactly once
// (why says what should have answered it), one not started then exactly
// once. It logs those running at the kill that ran again, which is allowed.
func checkRanOnceAcrossKill(t *testing.T, want map[string]string, final, atKill crashLog, completed map[string]bool, kill, why string) {
	t.Helper()
	var again []string
	for _, name := range sortedKeys(want) {
		n, before := final.Starts[name], atKill.Starts[name]
		switch {
		case n == 0:
			t.Errorf("action %s never logged a start, yet its output exists", name)
		case completed[name] && n != 1:
			t.Errorf("action %s had completed before %s but was executed %d times: %s", name, kill, n, why)
		case before == 0 && n != 1:
			t.Errorf("action %s had not started before %s but was executed %d times, want once", name, kill, n)
		case n > 1:
			again = append(again, fmt.Sprintf("%s(%d)", name, n))
		}
	}
	t.Logf("running at %s and executed again (allowed): %v", kill, again)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// errorLines returns the ERROR lines of Bazel's output (at most 20), or its tail.
func errorLines(output string) string {
	var lines []string
	for _, line := range strings.Split(output, "\n") {
		if strings.Contains(line, "ERROR") && len(lines) < 20 {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		all := strings.Split(strings.TrimRight(output, "\n"), "\n")
		if len(all) > 20 {
			all = all[len(all)-20:]
		}
		lines = all
	}
	return strings.Join(lines, "\n")
}

// newCrashWorkspace is newBazelWorkspace for testdata/bazel/crash (see
// newPlatformsWorkspace).
func newCrashWorkspace(t *testing.T, c *bazelClient) *bazelWorkspace {
	t.Helper()
	w := newBazelWorkspace(t, c)
	w.Dir = filepath.Join(filepath.Dir(w.Dir), "crash")
	if _, err := os.Stat(filepath.Join(w.Dir, "WORKSPACE")); err != nil {
		t.Fatalf("crash workspace: %v", err)
	}
	return w
}

// crashServer starts `gantry serve` processes one after the other on the same loopback
// ports and data directory, like startGantry starts one.
type crashServer struct {
	t        *testing.T
	bin      string
	dir      string
	GRPCAddr string
	HTTPAddr string
	DataDir  string
	args     []string
	starts   int
}

func newCrashServer(t *testing.T, extraArgs ...string) *crashServer {
	t.Helper()
	s := &crashServer{t: t, bin: gantryBin(t), dir: testDir(t, "gantry"), args: extraArgs}
	s.GRPCAddr, s.HTTPAddr = freeLoopbackAddr(t), freeLoopbackAddr(t)
	for s.HTTPAddr == s.GRPCAddr {
		s.HTTPAddr = freeLoopbackAddr(t)
	}
	s.DataDir = filepath.Join(s.dir, "data")
	return s
}

// crashProc is one server process; killed ones are not stopped again at the end.
type crashProc struct {
	*gantryProc
	killed bool
}

// start starts a server on s's ports and data directory and waits until it is healthy.
// When the ports are still taken it tries again. The server is stopped when the test
// ends, unless it was killed; a server that exits by itself fails the test.
func (s *crashServer) start() *crashProc {
	t := s.t
	t.Helper()
	var lastErr error
	for attempt := 1; attempt <= crashRestartAttempts; attempt++ {
		p, err := s.startOnce()
		if err == nil {
			return p
		}
		lastErr = err
		if !strings.Contains(readTail(p.LogPath, 4096), "address already in use") {
			break
		}
		t.Logf("gantry start %d: ports still taken; trying again", s.starts)
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("gantry did not become healthy: %v", lastErr)
	return nil
}

func (s *crashServer) startOnce() (*crashProc, error) {
	t := s.t
	s.starts++
	g := &gantryProc{
		GRPCAddr: s.GRPCAddr,
		HTTPAddr: s.HTTPAddr,
		DataDir:  s.DataDir,
		LogPath:  filepath.Join(s.dir, fmt.Sprintf("gantry-%d.log", s.starts)),
		exited:   make(chan struct{}),
	}
	p := &crashProc{gantryProc: g}
	t.Logf("start %d of gantry", s.starts)
	g.launch(t, s.bin, s.dir, s.args...)
	t.Cleanup(func() {
		if !p.killed {
			g.stop(t)
			return
		}
		if t.Failed() {
			t.Logf("log of the killed gantry (%s):\n%s", g.LogPath, readTail(g.LogPath, gantryLogTail))
		}
	})
	start := time.Now()
	if err := g.waitHealthy(gantryStartTimeout); err != nil {
		select {
		case <-g.exited:
			p.killed = true // gone by itself; nothing to stop, and this attempt failed
		default:
		}
		return p, err
	}
	t.Logf("gantry healthy after %v", time.Since(start).Round(time.Millisecond))
	return p, nil
}

// kill9 sends SIGKILL to the server's process group and waits until it is gone.
func (p *crashProc) kill9(t *testing.T) {
	t.Helper()
	p.killed = true
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("killing gantry: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(crashKillWait):
		t.Fatalf("gantry still running %v after SIGKILL", crashKillWait)
	}
}

// waitIdle waits until the server has had no queued and no leased action, and the
// action log has not grown, for crashIdleWindow: the work it restored is done. It fails
// the test after crashIdleTimeout.
func (p *crashProc) waitIdle(t *testing.T, logPath string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + p.HTTPAddr + "/metrics"
	start := time.Now()
	lastChange := start
	lastLines := -1
	last := "no answer yet"
	for {
		lines := len(readCrashLog(t, logPath).Lines)
		queued, qerr := scrapeGauge(client, url, "gantry_scheduler_queued_actions")
		leased, lerr := scrapeGauge(client, url, "gantry_scheduler_leased_actions")
		switch {
		case qerr != nil || lerr != nil:
			last = fmt.Sprintf("metrics: %v, %v", qerr, lerr)
			lastChange = time.Now()
		case queued != 0 || leased != 0 || lines != lastLines:
			last = fmt.Sprintf("%v queued, %v leased, %d log lines", queued, leased, lines)
			lastChange = time.Now()
		}
		lastLines = lines
		if time.Since(lastChange) >= crashIdleWindow {
			t.Logf("restarted gantry idle after %v (%d log lines)", lastChange.Sub(start).Round(time.Millisecond), lines)
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("gantry exited while the test waited for it to finish its restored work: %v", p.err)
		default:
		}
		if time.Since(start) > crashIdleTimeout {
			t.Fatalf("the restarted gantry did not become idle within %v (last: %s)", crashIdleTimeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
