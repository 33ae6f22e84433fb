package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testutil/cluster"
)

const (
	// gantryStartTimeout bounds the wait for /healthz to answer 200.
	gantryStartTimeout = 30 * time.Second
	// gantryStopTimeout is how long a SIGTERM'd server gets before SIGKILL.
	gantryStopTimeout = 10 * time.Second
	// gantryLogTail is how much of the server log a failed test prints.
	gantryLogTail = 64 << 10
)

// gantryProc is one `gantry serve` subprocess started for a test.
type gantryProc struct {
	// GRPCAddr is the host:port of the REAPI gRPC endpoint.
	GRPCAddr string
	// HTTPAddr is the host:port of the HTTP endpoint (health, metrics, status).
	HTTPAddr string
	// DataDir is the server's --data-dir.
	DataDir string
	// LogPath is the file receiving the server's stdout and stderr.
	LogPath string

	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result, valid once exited is closed
}

// GRPCURL returns the address in the form Bazel's --remote_cache and
// --remote_executor take.
func (g *gantryProc) GRPCURL() string { return "grpc://" + g.GRPCAddr }

// startGantry starts `gantry serve` on free loopback ports with a fresh data directory,
// waits until GET /healthz answers 200, and stops the server when the test ends. The
// server's output goes to a file that is printed if the test fails; a server that
// exits on its own before the test ends fails the test.
func startGantry(t *testing.T, extraArgs ...string) *gantryProc {
	t.Helper()
	return startGantryBin(t, gantryBin(t), extraArgs...)
}

// startGantryBin is startGantry with another gantry binary.
func startGantryBin(t *testing.T, bin string, extraArgs ...string) *gantryProc {
	t.Helper()
	dir := testDir(t, "gantry")
	grpcAddr, httpAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	for httpAddr == grpcAddr {
		httpAddr = freeLoopbackAddr(t)
	}
	g := &gantryProc{
		GRPCAddr: grpcAddr,
		HTTPAddr: httpAddr,
		DataDir:  filepath.Join(dir, "data"),
		LogPath:  filepath.Join(dir, "gantry.log"),
		exited:   make(chan struct{}),
	}
	g.launch(t, bin, dir, extraArgs...)
	// Registered after testDir's cleanup, so it runs before the directory goes.
	t.Cleanup(func() { g.stop(t) })

	start := time.Now()
	if err := g.waitHealthy(gantryStartTimeout); err != nil {
		t.Fatalf("gantry did not become healthy: %v", err)
	}
	t.Logf("gantry healthy after %v: grpc=%s http=%s", time.Since(start).Round(time.Millisecond), g.GRPCAddr, g.HTTPAddr)
	return g
}

// launch starts `gantry serve` for g (its addresses, data dir and log) in
// its own process group, so stopping it also stops anything it spawned
// (workers, actions). g.exited closes when the process ends.
func (g *gantryProc) launch(t *testing.T, bin, dir string, extraArgs ...string) {
	t.Helper()
	logFile, err := os.Create(g.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"serve",
		"--listen", g.GRPCAddr,
		"--http-listen", g.HTTPAddr,
		"--data-dir", g.DataDir,
	}, extraArgs...)
	g.cmd = exec.Command(bin, args...)
	g.cmd.Dir = dir
	g.cmd.Stdout = logFile
	g.cmd.Stderr = logFile
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Logf("starting %s %q", bin, args)
	if err := g.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting gantry: %v", err)
	}
	go func() {
		g.err = g.cmd.Wait()
		logFile.Close()
		close(g.exited)
	}()
}

// waitHealthy polls /healthz until it answers 200, the process exits, or timeout.
func (g *gantryProc) waitHealthy(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + g.HTTPAddr + "/healthz"
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = "status " + resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-g.exited:
			return fmt.Errorf("gantry exited before becoming healthy: %v", g.err)
		case <-ctx.Done():
			return fmt.Errorf("no 200 from %s within %v (last: %s)", url, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop ends the server: SIGTERM to its process group, then SIGKILL after
// gantryStopTimeout. It fails the test if the server had already exited by itself, and
// prints the server log if the test failed.
func (g *gantryProc) stop(t *testing.T) {
	select {
	case <-g.exited:
		t.Errorf("gantry exited before the test ended: %v", g.err)
	default:
		pgid := g.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-g.exited:
		case <-time.After(gantryStopTimeout):
			t.Logf("gantry ignored SIGTERM for %v; killing it", gantryStopTimeout)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-g.exited
		}
	}
	if b, err := os.ReadFile(g.LogPath); err == nil && strings.Contains(string(b), "WARNING: DATA RACE") {
		t.Errorf("gantry (built with -race) reported a data race; see its log")
	}
	if t.Failed() {
		t.Logf("gantry log (%s):\n%s", g.LogPath, readTail(g.LogPath, gantryLogTail))
	}
}

// freeLoopbackAddr returns 127.0.0.1:PORT for a port that was free a moment ago.
func freeLoopbackAddr(t *testing.T) string { t.Helper(); return cluster.FreeAddr(t) }

// readTail returns at most the last n bytes of the file at path.
func readTail(path string, n int64) string { return cluster.ReadTail(path, n) }

// workerProc is one standalone `gantry worker` subprocess started for a test.
type workerProc struct {
	// WorkDir is the worker's --work-dir.
	WorkDir string
	// LogPath is the file receiving the worker's stdout and stderr.
	LogPath string

	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result, valid once exited is closed
}

// startWorker starts `gantry worker --scheduler g --work-dir DIR` (the test's gantry
// binary, a fresh work directory) with extraArgs appended, e.g. --id, --property,
// --config. It does not wait for the worker to register (see waitWorkers). The worker
// is stopped when the test ends; its output goes to a file that is printed if the test
// fails, and a worker that exits on its own before the test ends fails the test.
func startWorker(t *testing.T, g *gantryProc, extraArgs ...string) *workerProc {
	t.Helper()
	bin := gantryBin(t)
	dir := testDir(t, "worker")
	p := &workerProc{
		WorkDir: filepath.Join(dir, "work"),
		LogPath: filepath.Join(dir, "worker.log"),
		exited:  make(chan struct{}),
	}
	logFile, err := os.Create(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"worker", "--scheduler", g.GRPCAddr, "--work-dir", p.WorkDir}, extraArgs...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout = logFile
	p.cmd.Stderr = logFile
	// Own process group, so stopping it also stops the actions it runs.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Logf("starting %s %q", bin, args)
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting gantry worker: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	// Registered after testDir's cleanup (so it runs before the directory goes) and
	// after the server's (so the worker stops before its scheduler does).
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop ends the worker like gantryProc.stop ends the server.
func (p *workerProc) stop(t *testing.T) {
	select {
	case <-p.exited:
		t.Errorf("gantry worker exited before the test ended: %v", p.err)
	default:
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(gantryStopTimeout):
			t.Logf("gantry worker ignored SIGTERM for %v; killing it", gantryStopTimeout)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.exited
		}
	}
	if b, err := os.ReadFile(p.LogPath); err == nil && strings.Contains(string(b), "WARNING: DATA RACE") {
		t.Errorf("gantry worker (built with -race) reported a data race; see its log")
	}
	if t.Failed() {
		t.Logf("gantry worker log (%s):\n%s", p.LogPath, readTail(p.LogPath, gantryLogTail))
	}
}

// waitWorkers polls the server's gantry_scheduler_workers metric until at least n
// workers are registered, failing the test after timeout.
func (g *gantryProc) waitWorkers(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + g.HTTPAddr + "/metrics"
	start := time.Now()
	deadline := start.Add(timeout)
	last := "no answer yet"
	for {
		if got, err := scrapeGauge(client, url, "gantry_scheduler_workers"); err != nil {
			last = err.Error()
		} else if got >= float64(n) {
			t.Logf("%v workers registered after %v", got, time.Since(start).Round(time.Millisecond))
			return
		} else {
			last = fmt.Sprintf("%v registered", got)
		}
		select {
		case <-g.exited:
			t.Fatalf("gantry exited while waiting for %d workers: %v", n, g.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers did not register within %v (last: %s)", n, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrapeGauge returns the value of an unlabelled metric from a Prometheus text page.
func scrapeGauge(client *http.Client, url, name string) (float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, url)
}
