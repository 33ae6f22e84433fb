package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
	bin := gantryBin(t)
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
	// Own process group, so stopping it also stops anything it spawned (workers,
	// actions).
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
	// Registered after testDir's cleanup, so it runs before the directory goes.
	t.Cleanup(func() { g.stop(t) })

	start := time.Now()
	if err := g.waitHealthy(gantryStartTimeout); err != nil {
		t.Fatalf("gantry did not become healthy: %v", err)
	}
	t.Logf("gantry healthy after %v: grpc=%s http=%s", time.Since(start).Round(time.Millisecond), g.GRPCAddr, g.HTTPAddr)
	return g
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
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
}

// readTail returns at most the last n bytes of the file at path.
func readTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot stat: %v)", err)
	}
	prefix := ""
	if st.Size() > n {
		if _, err := f.Seek(st.Size()-n, 0); err != nil {
			return fmt.Sprintf("(cannot seek: %v)", err)
		}
		prefix = fmt.Sprintf("... (%d earlier bytes cut)\n", st.Size()-n)
	}
	b, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	return prefix + string(b)
}
