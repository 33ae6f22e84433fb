package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"

	"github.com/gantry-build/gantry/internal/batch"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/testutil/cproject"
)

// clientProjectOptions sizes the C project of the client tests: a few hundred
// sources and headers in nested directories, cheap to compile.
var clientProjectOptions = cproject.Options{Modules: 8, FilesPerModule: 25, HeadersPerModule: 6, Work: 2}

// generateProject generates a C project in a fresh directory of the test.
func generateProject(t *testing.T, o cproject.Options) *cproject.Project {
	t.Helper()
	p, err := cproject.Generate(filepath.Join(testDir(t, "cproject"), "proj"), o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// clientEnv is the environment of the client commands against g: its
// address, a client cache of the test's own, and no local fallback (a
// compile that does not run remotely fails the test).
func clientEnv(t *testing.T, g *gantryProc) []string {
	return []string{"GANTRY_SERVER=" + g.GRPCAddr, "GANTRY_CACHE_DIR=" + testDir(t, "cc-cache"), "GANTRY_CC_FALLBACK=false"}
}

// requireCTools skips (or, under CI, fails) a test when make or gcc is missing.
func requireCTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range append([]string{"make", "gcc"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			if inCI() {
				t.Fatalf("%s is missing; scripts/install-test-deps.sh installs it", tool)
			}
			t.Skipf("%s is missing; scripts/install-test-deps.sh installs it", tool)
		}
	}
}

// cmdResult is what a finished command printed and how it exited.
type cmdResult struct {
	stdout, stderr string
	code           int
}

// runCmd runs argv in dir with env added to the test's environment, for at
// most timeout.
func runCmd(t *testing.T, dir string, env []string, timeout time.Duration, argv ...string) cmdResult {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %q: %v", argv, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%q did not finish within %v; stderr:\n%s", argv, timeout, tail(stderr.String()))
	}
	res := cmdResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		t.Fatalf("%q: %v", argv, err)
	}
	return res
}

// mustRunCmd is runCmd that fails the test on a non-zero exit.
func mustRunCmd(t *testing.T, dir string, env []string, timeout time.Duration, argv ...string) cmdResult {
	t.Helper()
	res := runCmd(t, dir, env, timeout, argv...)
	if res.code != 0 {
		t.Fatalf("%q exited %d; stderr:\n%s", argv, res.code, tail(res.stderr))
	}
	return res
}

// tail returns the last 8 KiB of s.
func tail(s string) string {
	if len(s) > 8<<10 {
		return "...\n" + s[len(s)-8<<10:]
	}
	return s
}

// readObjects reads the project's object files, and their dependency files
// (.d) when the Makefile built them.
func readObjects(t *testing.T, p *cproject.Project) map[string][]byte {
	t.Helper()
	objs, err := p.ReadObjects()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// sameObjects fails the test unless got holds exactly the objects of want,
// byte for byte.
func sameObjects(t *testing.T, how string, want, got map[string][]byte) {
	t.Helper()
	if differ := cproject.DifferingObjects(want, got); len(differ) > 0 {
		t.Fatalf("%s: %d of %d objects and dependency files differ from the local build, e.g. %s", how, len(differ), len(want), differ[0])
	}
}

// cleanBuild removes the project's build outputs.
func cleanBuild(t *testing.T, p *cproject.Project) {
	t.Helper()
	if err := p.Clean(); err != nil {
		t.Fatal(err)
	}
}

// counter reads a counter (with its labels, as the exposition writes them)
// from the server's /metrics; missing counts as 0.
func (g *gantryProc) counter(t *testing.T, series string) float64 {
	t.Helper()
	v, err := scrapeGauge(&http.Client{Timeout: 5 * time.Second}, "http://"+g.HTTPAddr+"/metrics", series)
	if err != nil && !strings.Contains(err.Error(), "no ") {
		t.Fatal(err)
	}
	return v
}

const (
	executedSeries = `gantry_operations_total{code="OK",result="success"}`
	acHitSeries    = `gantry_action_cache_lookups_total{result="hit",source="get_action_result"}`
	acMissSeries   = `gantry_action_cache_lookups_total{result="miss",source="get_action_result"}`
)

// TestClientMake builds a generated C project locally and with `make
// CC="gantry cc gcc"` against `gantry serve`: the objects are byte-identical
// to the local ones, every compile ran remotely, a rebuild after `make clean`
// is all cache hits, and a failing compile reads exactly as the local
// compiler's.
func TestClientMake(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	requireCTools(t)
	g := startGantry(t)
	bin := launcherBin(t)
	p := generateProject(t, clientProjectOptions)
	n := float64(len(p.Sources))
	env := clientEnv(t, g)

	mustRunCmd(t, p.Dir, nil, 10*time.Minute, "make", "-s", "-j2")
	local := readObjects(t, p)
	want := mustRunCmd(t, p.Dir, nil, time.Minute, "./app").stdout
	cleanBuild(t, p)

	cc := "CC=" + bin + " cc gcc"
	executed := g.counter(t, executedSeries)
	mustRunCmd(t, p.Dir, env, 15*time.Minute, "make", "-s", "-j2", cc)
	sameObjects(t, "make CC=gantry cc gcc", local, readObjects(t, p))
	if got := mustRunCmd(t, p.Dir, nil, time.Minute, "./app").stdout; got != want {
		t.Errorf("the remotely compiled app prints %q, the local one %q", got, want)
	}
	if ran := g.counter(t, executedSeries) - executed; ran != n {
		t.Errorf("the server executed %v actions for %v compiles", ran, n)
	}

	cleanBuild(t, p)
	executed, hits := g.counter(t, executedSeries), g.counter(t, acHitSeries)
	mustRunCmd(t, p.Dir, env, 10*time.Minute, "make", "-s", "-j2", cc)
	sameObjects(t, "make CC=gantry cc gcc, cached", local, readObjects(t, p))
	if ran := g.counter(t, executedSeries) - executed; ran != 0 {
		t.Errorf("the rebuild executed %v actions; want all %v from the cache", ran, n)
	}
	if hit := g.counter(t, acHitSeries) - hits; hit != n {
		t.Errorf("the rebuild had %v cache hits; want %v", hit, n)
	}

	// A compile error: the same message and exit code as the local compiler,
	// for a source named relatively and absolutely.
	bad := filepath.Join(p.Dir, "src", "bad", "broken.c")
	if err := os.MkdirAll(filepath.Dir(bad), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("#include \"common/util.h\"\nint broken(void) { return undefined_thing + 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"src/bad/broken.c", bad} {
		args := []string{"gcc", "-Iinclude", "-O2", "-c", src, "-o", "build/broken.o"}
		wantRes := runCmd(t, p.Dir, nil, time.Minute, args...)
		if wantRes.code == 0 {
			t.Fatalf("the broken source compiled locally")
		}
		got := runCmd(t, p.Dir, env, time.Minute, append([]string{bin, "cc"}, args...)...)
		if got.code != wantRes.code || got.stderr != wantRes.stderr {
			t.Errorf("gantry cc on %s: exit %d, stderr:\n%s\nthe local compiler: exit %d, stderr:\n%s", src, got.code, got.stderr, wantRes.code, wantRes.stderr)
		}
	}
}

func parseSummary(t *testing.T, res cmdResult) batch.SummaryJSON {
	t.Helper()
	var s batch.SummaryJSON
	if err := json.Unmarshal([]byte(res.stdout), &s); err != nil {
		t.Fatalf("gantry batch --json printed no summary (%v):\n%s\nstderr:\n%s", err, res.stdout, tail(res.stderr))
	}
	return s
}

// TestClientBatch builds the generated project with `gantry batch
// compile_commands.json`: the objects are byte-identical to a local build,
// and a second run is all cache hits.
func TestClientBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	requireCTools(t)
	g := startGantry(t)
	bin := gantryBin(t)
	p := generateProject(t, clientProjectOptions)
	n := len(p.Sources)
	mustRunCmd(t, p.Dir, nil, 10*time.Minute, "make", "-s", "-j2", "CFLAGS="+strings.Join(cproject.CFlags, " "))
	local := readObjects(t, p)
	cleanBuild(t, p)
	// The Makefile's compiles write dependency files; compile_commands.json's
	// do not. Compare the objects only.
	for name := range local {
		if strings.HasSuffix(name, ".d") {
			delete(local, name)
		}
	}

	env := clientEnv(t, g)
	executed := g.counter(t, executedSeries)
	missed := g.counter(t, acMissSeries)
	cold := parseSummary(t, mustRunCmd(t, p.Dir, env, 15*time.Minute, bin, "batch", "--json", "compile_commands.json"))
	sameObjects(t, "gantry batch", local, readObjects(t, p))
	if cold.Total != n || cold.Succeeded != n || cold.Local != 0 || cold.CacheHits != 0 || cold.BytesUp == 0 {
		t.Errorf("cold batch summary %+v; want %d jobs run remotely, uploading their inputs", cold, n)
	}
	if ran := g.counter(t, executedSeries) - executed; ran != float64(n) {
		t.Errorf("the server executed %v actions for %d compiles", ran, n)
	}
	// Once the first jobs all miss, the client stops asking the cache
	// before Execute (which checks it anyway).
	if asked := g.counter(t, acMissSeries) - missed; asked == 0 || asked > float64(n/2) {
		t.Errorf("the cold batch made %v GetActionResult calls for %d jobs; want a few at the start, then none", asked, n)
	}

	cleanBuild(t, p)
	executed, hits := g.counter(t, executedSeries), g.counter(t, acHitSeries)
	warm := parseSummary(t, mustRunCmd(t, p.Dir, env, 10*time.Minute, bin, "batch", "--json", "compile_commands.json"))
	sameObjects(t, "gantry batch, cached", local, readObjects(t, p))
	if warm.Succeeded != n || warm.CacheHits != n || warm.BytesUp != 0 {
		t.Errorf("cached batch summary %+v; want all %d jobs cache hits with nothing uploaded", warm, n)
	}
	// A run starts by asking the cache, and keeps asking while it hits.
	if hit := g.counter(t, acHitSeries) - hits; hit != float64(n) {
		t.Errorf("the cached batch had %v GetActionResult hits; want all %d", hit, n)
	}
	if ran := g.counter(t, executedSeries) - executed; ran != 0 {
		t.Errorf("the cached batch executed %v actions", ran)
	}

	// A compile error fails its job with the compiler's message; the
	// others still build with --keep-going.
	bad := filepath.Join(p.Dir, "src", "mod0", "sub0", "f0.c")
	if err := os.WriteFile(bad, []byte("int broken(void) { return undefined_thing; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runCmd(t, p.Dir, env, 10*time.Minute, bin, "batch", "--json", "--keep-going", "compile_commands.json")
	s := parseSummary(t, res)
	if res.code != 1 || s.Failed != 1 || s.Succeeded != n-1 {
		t.Errorf("batch with a broken source: exit %d, summary %+v; want exit 1, 1 failed, %d succeeded", res.code, s, n-1)
	}
	// The quotes around the name depend on the locale.
	if !strings.Contains(res.stderr, "src/mod0/sub0/f0.c:1:27: error: ") || !strings.Contains(res.stderr, "undefined_thing") {
		t.Errorf("the compiler's message is missing from gantry batch's output:\n%s", tail(res.stderr))
	}
}

// TestClientCMake builds the generated project with CMake three ways: with
// its compiler launcher set to gantry cc, with gantry batch on the
// compile_commands.json CMake writes (absolute paths), and locally.
func TestClientCMake(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	requireCTools(t, "cmake")
	g := startGantry(t)
	bin := launcherBin(t)
	p := generateProject(t, cproject.Options{Modules: 3, FilesPerModule: 10, HeadersPerModule: 3, Work: 1})
	env := clientEnv(t, g)
	build := filepath.Join(p.Dir, "out")
	objects := func() map[string][]byte {
		t.Helper()
		objs := map[string][]byte{}
		err := filepath.WalkDir(build, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".o") {
				return err
			}
			b, err := os.ReadFile(path)
			objs[path] = b
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != len(p.Sources) {
			t.Fatalf("found %d objects under %s; want %d", len(objs), build, len(p.Sources))
		}
		return objs
	}
	configure := func(extra ...string) {
		t.Helper()
		if err := os.RemoveAll(build); err != nil {
			t.Fatal(err)
		}
		mustRunCmd(t, p.Dir, env, 5*time.Minute, append([]string{"cmake", "-S", ".", "-B", build, "-DCMAKE_C_COMPILER=gcc"}, extra...)...)
	}
	configure()
	mustRunCmd(t, p.Dir, nil, 10*time.Minute, "cmake", "--build", build, "-j2")
	local := objects()

	executed := g.counter(t, executedSeries)
	configure("-DCMAKE_C_COMPILER_LAUNCHER=" + bin + ";cc")
	mustRunCmd(t, p.Dir, env, 10*time.Minute, "cmake", "--build", build, "-j2")
	sameObjects(t, "cmake with the gantry cc launcher", local, objects())
	if ran := g.counter(t, executedSeries) - executed; ran != float64(len(p.Sources)) {
		t.Errorf("the server executed %v actions for %d compiles", ran, len(p.Sources))
	}

	// gantry batch on CMake's own compile_commands.json, into a fresh
	// build tree: the objects are the local ones.
	configure()
	s := parseSummary(t, mustRunCmd(t, p.Dir, env, 10*time.Minute, bin, "batch", "--json", filepath.Join(build, "compile_commands.json")))
	if s.Succeeded != len(p.Sources) || s.Local != 0 {
		t.Errorf("gantry batch on CMake's compile_commands.json: %+v; want every compile remote", s)
	}
	sameObjects(t, "gantry batch on CMake's compile_commands.json", local, objects())
}

// batchProc is a `gantry batch` running in the background.
type batchProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{} // closed when the process has ended
	err    error         // Wait's result, valid once exited is closed
}

// startBatch starts `gantry batch` on a job list in the background; it is
// killed at the end of the test if it still runs.
func startBatch(t *testing.T, g *gantryProc, dir string, args ...string) *batchProc {
	t.Helper()
	p := &batchProc{stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(gantryBin(t), append([]string{"batch"}, args...)...)
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), "GANTRY_SERVER="+g.GRPCAddr)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// wait waits up to timeout for the batch to end and returns its exit code.
func (p *batchProc) wait(t *testing.T, timeout time.Duration, after string) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("gantry batch did not exit within %v of %s:\n%s", timeout, after, p.stderr.String())
	}
	var exit *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &exit):
		return exit.ExitCode()
	}
	t.Fatalf("gantry batch: %v", p.err)
	return -1
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// operations lists the server's operations: how many it knows and how
// many are not done.
func (g *gantryProc) operations(t *testing.T) (known, running int) {
	t.Helper()
	conn, err := client.Dial(g.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	token := ""
	for {
		resp, err := longrunningpb.NewOperationsClient(conn).ListOperations(ctx, &longrunningpb.ListOperationsRequest{PageToken: token})
		if err != nil {
			t.Fatalf("ListOperations: %v", err)
		}
		for _, op := range resp.Operations {
			known++
			if !op.Done {
				running++
			}
		}
		if token = resp.NextPageToken; token == "" {
			return known, running
		}
	}
}

// waitFor polls cond every 50ms until it holds, failing the test after
// timeout with what.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeSleepJobs writes a job list of n jobs that each sleep for secs and
// then write an output, uncached.
func writeSleepJobs(t *testing.T, dir string, n int, secs string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("jobs:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - name: j%d\n    command: [sh, -c, \"sleep %s; echo %d > out%d\"]\n    outputs: [out%d]\n    no_cache: true\n", i, secs, i, i, i)
	}
	path := filepath.Join(dir, "jobs.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBatchInterrupt: Ctrl-C (SIGINT) in the middle of a batch cancels the
// remote operations in flight, leaves none running on the server, prints
// the summary and exits 130.
func TestBatchInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	g := startGantry(t)
	dir := testDir(t, "batch")
	jobs := writeSleepJobs(t, dir, 6, "120")
	b := startBatch(t, g, dir, "--jobs", "2", jobs)
	waitFor(t, time.Minute, "two operations execute", func() bool { _, running := g.operations(t); return running >= 2 })
	if err := b.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t, time.Minute, "SIGINT"); code != 130 {
		t.Errorf("gantry batch after SIGINT: exit status %d; want 130\n%s", code, b.stderr.String())
	}
	known, running := g.operations(t)
	if known < 2 || running != 0 {
		t.Errorf("after the interrupted batch the server knows %d operations, %d of them not done; want none running", known, running)
	}
	if out := b.stderr.String(); !strings.Contains(out, "cancelled 2 remote operations") || !strings.Contains(out, "stopped after 6 jobs") {
		t.Errorf("gantry batch printed no summary of the cancelled run:\n%s", out)
	}
}

// procState is the state letter of process pid (R, S, T, ...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ...; comm may hold spaces, so cut after the last ')'.
	s := string(b)
	rest := s[strings.LastIndexByte(s, ')')+1:]
	return strings.Fields(rest)[0]
}

// TestBatchSuspendResume: Ctrl-Z (SIGTSTP) stops the batch (no new
// operation reaches the server while it is stopped) and SIGCONT (fg)
// resumes it to the end.
func TestBatchSuspendResume(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	g := startGantry(t)
	dir := testDir(t, "batch")
	const n = 10
	jobs := writeSleepJobs(t, dir, n, "0.5")
	b := startBatch(t, g, dir, "--jobs", "2", jobs)
	waitFor(t, time.Minute, "a job is done", func() bool { return strings.Contains(b.stderr.String(), " done ") })
	if err := b.cmd.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "gantry batch is stopped", func() bool { return procState(t, b.cmd.Process.Pid) == "T" })
	// What was in flight finishes on the server; then nothing new comes.
	waitFor(t, time.Minute, "the operations in flight end", func() bool { _, running := g.operations(t); return running == 0 })
	known, _ := g.operations(t)
	if known >= n {
		t.Fatalf("all %d jobs reached the server before the batch was suspended; the test proves nothing", n)
	}
	time.Sleep(1500 * time.Millisecond) // a window in which a running dispatcher would send more
	if again, _ := g.operations(t); again != known {
		t.Errorf("the server got %d new operations while the batch was suspended", again-known)
	}
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t, 2*time.Minute, "SIGCONT"); code != 0 {
		t.Fatalf("gantry batch after SIGCONT: exit status %d\n%s", code, b.stderr.String())
	}
	for i := 0; i < n; i++ {
		if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("out%d", i))); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(i) {
			t.Errorf("output out%d: %q, %v", i, b, err)
		}
	}
}
