package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/batch"
	"github.com/gantry-build/gantry/internal/testutil/bazeltest"
	"github.com/gantry-build/gantry/internal/testutil/cluster"
	"github.com/gantry-build/gantry/internal/testutil/cproject"
)

const (
	// firstBuild is when the first round of builds starts, so that a
	// 3-minute run has one of each; then a round starts every buildEvery.
	firstBuild = 15 * time.Second
	buildEvery = 2 * time.Minute
	// buildAttemptTimeout bounds one `bazel test` or `gantry batch`.
	buildAttemptTimeout = 4 * time.Minute
	// buildBound is the longest a build may take, retries included,
	// before the test calls it lost.
	buildBound = 8 * time.Minute
	// bazelJobs is Bazel's --jobs, and bazelHeap its JVM's heap: Bazel
	// shares two cores with the farm and the load.
	bazelJobs = 2
	bazelHeap = "-Xmx512m"
	// bazelShutdownTimeout bounds `bazel shutdown` after each round.
	bazelShutdownTimeout = time.Minute
	// buildInstance and batchInstance are the builds' instance names.
	bazelInstance = "chaos-bazel"
	batchInstance = "chaos-batch"
)

// explaining are the fault log's kinds that explain a failed build.
var explaining = append(append([]string(nil), faultKinds...), "restart")

// batchProject sizes the C project of `gantry batch`: a few dozen cheap
// compiles.
var batchProject = cproject.Options{Modules: 3, FilesPerModule: 6, HeadersPerModule: 2, Work: 1}

// builds runs real clients through HAProxy in rounds while the faults go
// on: `bazel test //...` of the e2e workspace (testdata/bazel) and
// `gantry batch` of a generated C project. A build that fails is tried
// again, as a developer would, when a fault explains the failure; one
// that reports success must have the right outputs (the tests passed and
// bazel-bin holds what it must; the objects equal a local gcc build).
type builds struct {
	dir   string
	root  string // the repository, holding testdata/bazel
	lb    string // HAProxy's address
	gbin  string // the gantry binary
	bazel *bazeltest.Client
	rec   *recorder
	logf  func(format string, args ...any)
	// ctx ends at the first wrong answer, abandoning the builds.
	ctx context.Context

	project *cproject.Project
	local   map[string][]byte // the project's objects built locally

	// done are the builds run, in order (read once run has returned).
	done []*build
}

// build is one build, from its first attempt to its final answer.
type build struct {
	kind     string // "bazel test" or "gantry batch"
	round    int
	variant  string
	attempts int
	retryWhy []string
	final    string // "completed", "wrong", "lost", "abandoned"
	// remote and cached count the actions run remotely and answered from
	// the ActionCache, by the successful attempt.
	remote, cached int
	start, end     time.Time
}

// newBuilds checks the clients and prepares the C project and its local
// build. Bazel, gcc and make missing skip the builds on a developer
// machine (logged) and fail the test under CI=true.
func newBuilds(t *testing.T, dir, lb string, rec *recorder) *builds {
	t.Helper()
	bz := bazeltest.Bazel4()
	// Bazel shares the machine with the farm: a bounded heap.
	bz.StartupFlags = append(bz.StartupFlags, "--host_jvm_args="+bazelHeap)
	var missing []string
	if m := bz.Missing(); m != "" {
		missing = append(missing, m)
	}
	for _, tool := range []string{"gcc", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool+" not found on PATH (scripts/install-test-deps.sh)")
		}
	}
	if len(missing) > 0 {
		msg := strings.Join(missing, "; ")
		if cluster.InCI() {
			t.Fatal(msg + "; CI=true, so the builds of the loop cannot be left out")
		}
		t.Logf("no builds in the loop: %s", msg)
		return nil
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b := &builds{dir: mkdir(t, dir, "builds"), root: root, lb: lb, gbin: gantryBin(t), bazel: bz, rec: rec, logf: t.Logf}
	// Each round shuts its Bazel server down; one left by a round cut
	// short (a failed test) goes here.
	t.Cleanup(b.killServers)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-rec.stop; cancel() }()
	b.ctx = ctx
	b.project, err = cproject.Generate(filepath.Join(b.dir, "cproject"), batchProject)
	if err != nil {
		t.Fatal(err)
	}
	p := b.project
	cmd := exec.Command("make", "-s", "-j2", "CFLAGS="+strings.Join(cproject.CFlags, " "))
	cmd.Dir = p.Dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the C project locally: %v\n%s", err, out)
	}
	if b.local, err = p.ReadObjects(); err != nil {
		t.Fatal(err)
	}
	// compile_commands.json's compiles write no dependency files.
	for name := range b.local {
		if strings.HasSuffix(name, ".d") {
			delete(b.local, name)
		}
	}
	if err := p.Clean(); err != nil {
		t.Fatal(err)
	}
	return b
}

// run starts a round of builds at firstBuild, then every buildEvery, until
// stop is closed; a round's builds run one after the other, each to its
// final answer.
func (b *builds) run(stop <-chan struct{}) {
	next := time.After(firstBuild)
	for round := 1; ; round++ {
		select {
		case <-stop:
			return
		case <-next:
		}
		next = time.After(buildEvery)
		b.done = append(b.done, b.bazelTest(round))
		if b.rec.failed() {
			return
		}
		b.done = append(b.done, b.batch(round))
		if b.rec.failed() {
			return
		}
	}
}

// attempt is what one try of a build said: ok, or why it failed, and
// whether that is a wrong answer rather than a failure to retry.
type attempt struct {
	ok, wrong bool
	why       string
}

// retry runs tries of bd until one succeeds or answers wrong, while a
// fault explains each failure, for at most buildBound.
func (b *builds) retry(bd *build, try func() attempt) *build {
	bd.start = time.Now()
	defer func() { bd.end = time.Now() }()
	for {
		if b.ctx.Err() != nil {
			bd.final = "abandoned"
			return bd
		}
		if time.Since(bd.start) > buildBound {
			bd.final = "lost"
			b.rec.wrong(fmt.Sprintf("%s (round %d, %s): no success within %v (%d attempts: %s)",
				bd.kind, bd.round, bd.variant, buildBound, bd.attempts, strings.Join(bd.retryWhy, "; ")))
			return bd
		}
		bd.attempts++
		from := time.Now()
		a := try()
		outcome := a.why
		if a.ok {
			outcome = fmt.Sprintf("ok, %d actions executed remotely, %d cache hits", bd.remote, bd.cached)
		}
		b.logf("chaos: %s (round %d, %s) attempt %d from %s for %v: %s", bd.kind, bd.round, bd.variant, bd.attempts,
			strings.TrimSpace(b.rec.since(from)), time.Since(from).Round(100*time.Millisecond), outcome)
		switch {
		case a.ok:
			bd.final = "completed"
			return bd
		case a.wrong:
			bd.final = "wrong"
			b.rec.wrong(fmt.Sprintf("%s (round %d, %s, attempt %d): %s", bd.kind, bd.round, bd.variant, bd.attempts, a.why))
			return bd
		case b.ctx.Err() != nil:
		case !b.rec.during(from, time.Now(), faultGrace, explaining...):
			// A build may fail while a fault is active, not otherwise.
			bd.final = "wrong"
			b.rec.wrong(fmt.Sprintf("%s (round %d, %s, attempt %d) failed from %s to %s with no fault then: %s",
				bd.kind, bd.round, bd.variant, bd.attempts, b.rec.since(from), b.rec.since(time.Now()), a.why))
			return bd
		default:
			bd.retryWhy = append(bd.retryWhy, a.why)
			time.Sleep(retryPause)
		}
	}
}

// bazelTest runs `bazel test //...` of a fresh copy of the workspace,
// with a fresh output root (and so a Bazel server of its own, shut down
// at the end of the build), remotely through HAProxy. The first round
// finds an empty ActionCache and executes everything; later rounds
// alternate between --noremote_accept_cached (everything executes again)
// and accepting cached results (every entry checked by the outputs).
func (b *builds) bazelTest(round int) *build {
	bd := &build{kind: "bazel test", round: round, variant: "accepting cached results"}
	flags := []string{"//...",
		"--remote_executor=grpc://" + b.lb,
		"--remote_instance_name=" + bazelInstance,
		"--spawn_strategy=remote",
		"--genrule_strategy=remote",
		"--remote_timeout=60",
		"--jobs=" + strconv.Itoa(bazelJobs),
		"--test_output=errors",
	}
	if round%2 == 0 {
		bd.variant = "--noremote_accept_cached"
		flags = append(flags, "--noremote_accept_cached")
	}
	ws, err := bazeltest.NewWorkspace(b.bazel, filepath.Join(b.root, "testdata", "bazel"), filepath.Join(b.dir, fmt.Sprintf("bazel-%d", round)))
	if err != nil {
		b.rec.wrong(fmt.Sprintf("bazel test (round %d): %v", round, err))
		bd.final = "wrong"
		return bd
	}
	defer b.shutdown(ws)
	return b.retry(bd, func() attempt {
		ctx, cancel := context.WithTimeout(b.ctx, buildAttemptTimeout)
		defer cancel()
		res, err := ws.Run(ctx, "test", flags...)
		if err != nil {
			// A timed-out client leaves its server building: stop it, so the
			// next attempt starts clean.
			b.shutdown(ws)
			return attempt{why: err.Error()}
		}
		if res.ExitCode != 0 {
			return attempt{why: fmt.Sprintf("exit %d%s: %s (%s)", res.ExitCode, bazeltest.ExitCodeHint(res.ExitCode), firstError(res.Output), res.Log)}
		}
		s, ok := bazeltest.LastProcessSummary(res.Output)
		if !ok {
			return attempt{wrong: true, why: "no \"INFO: N processes\" line in Bazel's output: see " + res.Log}
		}
		if other := s.Except(bazeltest.KindRemote, bazeltest.KindRemoteCacheHit, bazeltest.KindInternal); len(other) != 0 {
			return attempt{wrong: true, why: fmt.Sprintf("processes ran other than remotely %v: %s", other, s.Line)}
		}
		if err := res.TestsPassed(); err != nil {
			return attempt{wrong: true, why: fmt.Sprintf("exit 0, but %v", firstLine(err))}
		}
		if err := ws.CheckOutputs(); err != nil {
			return attempt{wrong: true, why: fmt.Sprintf("exit 0 with wrong outputs: %v", err)}
		}
		bd.remote, bd.cached = s.Count(bazeltest.KindRemote), s.Count(bazeltest.KindRemoteCacheHit)
		if round%2 == 0 && bd.cached > 0 {
			return attempt{wrong: true, why: "remote cache hits with --noremote_accept_cached: " + s.Line}
		}
		return attempt{ok: true}
	})
}

// shutdown stops a workspace's Bazel server; if it does not stop, it is
// killed, so that no Bazel server outlives the test.
func (b *builds) shutdown(ws *bazeltest.Workspace) {
	if err := ws.Shutdown(bazelShutdownTimeout); err != nil {
		b.logf("chaos: bazel shutdown failed (%v); killing the server", err)
		killBazelServers(filepath.Join(ws.OutputUserRoot, "*", "server", "server.pid.txt"))
	}
}

// killServers kills every Bazel server the builds started that still runs.
func (b *builds) killServers() {
	killBazelServers(filepath.Join(b.dir, "bazel-*", "root", "*", "server", "server.pid.txt"))
}

// killBazelServers kills the Bazel servers whose pid files match pattern:
// each one only while its command line still names its output root, not
// a process that got its pid since.
func killBazelServers(pattern string) {
	files, _ := filepath.Glob(pattern)
	for _, f := range files {
		s, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(s)))
		if err != nil || pid <= 0 {
			continue
		}
		root := filepath.Dir(filepath.Dir(filepath.Dir(f)))
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(cmdline, []byte(root)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// batch runs `gantry batch` of the C project's compile_commands.json
// through HAProxy, with no local fallback (a compile that does not run
// remotely fails). The first round executes everything; later rounds
// alternate between --no-cache and accepting cached results.
func (b *builds) batch(round int) *build {
	bd := &build{kind: "gantry batch", round: round, variant: "accepting cached results"}
	args := []string{"batch", "--json", "--jobs", "4", "--uploads", "2", "--process", "1", "--instance", batchInstance}
	if round%2 == 0 {
		bd.variant = "--no-cache"
		args = append(args, "--no-cache")
	}
	args = append(args, "compile_commands.json")
	p := b.project
	n := len(p.Sources)
	return b.retry(bd, func() attempt {
		if err := p.Clean(); err != nil {
			return attempt{wrong: true, why: "cleaning the project: " + err.Error()}
		}
		ctx, cancel := context.WithTimeout(b.ctx, buildAttemptTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, b.gbin, args...)
		cmd.Dir = p.Dir
		cmd.Env = append(os.Environ(), "GANTRY_SERVER="+b.lb, "GANTRY_CACHE_DIR="+filepath.Join(b.dir, "cc-cache"), "GANTRY_CC_FALLBACK=false")
		cmd.WaitDelay = 10 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case ctx.Err() != nil:
			return attempt{why: fmt.Sprintf("did not finish within %v", buildAttemptTimeout)}
		case errors.As(err, &exit):
			log := filepath.Join(b.dir, fmt.Sprintf("batch-%d-%d.log", round, bd.attempts))
			_ = os.WriteFile(log, stderr.Bytes(), 0o644)
			return attempt{why: fmt.Sprintf("exit %d: %s (%s)", exit.ExitCode(), batchError(stderr.String()), log)}
		case err != nil:
			return attempt{wrong: true, why: "running gantry batch: " + err.Error()}
		}
		var s batch.SummaryJSON
		if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
			return attempt{wrong: true, why: fmt.Sprintf("exit 0 and no JSON summary (%v): %q", err, stdout.String())}
		}
		if s.Total != n || s.Succeeded != n || s.Local != 0 || s.Failed != 0 {
			return attempt{wrong: true, why: fmt.Sprintf("exit 0, summary %+v; want all %d compiles run remotely", s, n)}
		}
		got, err := p.ReadObjects()
		if err != nil {
			return attempt{wrong: true, why: "exit 0, but " + err.Error()}
		}
		if differ := cproject.DifferingObjects(b.local, got); len(differ) > 0 {
			return attempt{wrong: true, why: fmt.Sprintf("exit 0, but %d of %d objects differ from the local gcc build, e.g. %s", len(differ), len(b.local), differ[0])}
		}
		bd.remote, bd.cached = s.Succeeded-s.CacheHits, s.CacheHits
		if round%2 == 0 && bd.cached > 0 {
			return attempt{wrong: true, why: fmt.Sprintf("%d cache hits with --no-cache", bd.cached)}
		}
		return attempt{ok: true}
	})
}

// check: a round started must have ended with every build completed
// (wrong and lost ones are reported as they happen), and a run long
// enough for a round has one of each.
func (b *builds) check(duration time.Duration) {
	if b == nil || b.rec.failed() {
		return
	}
	kinds := map[string]int{}
	for _, bd := range b.done {
		if bd.final == "completed" {
			kinds[bd.kind]++
		}
	}
	if duration > firstBuild {
		for _, k := range []string{"bazel test", "gantry batch"} {
			if kinds[k] == 0 {
				b.rec.wrong(fmt.Sprintf("no %s completed in a run of %v", k, duration))
			}
		}
	}
}

// summary is the builds' line of the run's summary.
func (b *builds) summary() string {
	if b == nil {
		return "none (no Bazel, gcc or make here)"
	}
	var parts []string
	for _, k := range []string{"bazel test", "gantry batch"} {
		var completed, attempts, retried, remote, cached int
		var longest time.Duration
		for _, bd := range b.done {
			if bd.kind != k {
				continue
			}
			attempts += bd.attempts
			if bd.attempts > 1 {
				retried++
			}
			if bd.final == "completed" {
				completed++
				remote += bd.remote
				cached += bd.cached
				longest = max(longest, bd.end.Sub(bd.start))
			}
		}
		parts = append(parts, fmt.Sprintf("%s %d completed, %d retried (%d attempts; %d actions executed remotely, %d cache hits; longest %v)",
			k, completed, retried, attempts, remote, cached, longest.Round(time.Second)))
	}
	return strings.Join(parts, "; ")
}

// firstError is the first ERROR line of Bazel's output.
func firstError(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ERROR: ") {
			return short(errors.New(line))
		}
	}
	return "no ERROR line"
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// batchError is the first line of gantry batch's stderr that says what
// failed, or its last line.
func batchError(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for _, line := range lines {
		l := strings.ToLower(line)
		if strings.Contains(l, "error") || strings.Contains(l, "fail") || strings.Contains(l, "unavailable") {
			return short(errors.New(line))
		}
	}
	return short(errors.New(lines[len(lines)-1]))
}
