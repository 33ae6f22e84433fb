//go:build linux

// Package miniotest starts a throwaway MinIO server for tests: a temp data
// directory, free loopback ports, random root credentials, stopped when the
// test ends. Tests of the S3 object-storage backend and the multi-node
// end-to-end test use it as the bucket.
//
// The minio binary is looked up on PATH, then in <repo>/.tools/bin, then in
// $(go env GOPATH)/bin (scripts/install-test-deps.sh installs it into
// <repo>/.tools/bin). When it is missing the test is skipped, except when
// CI=true: CI must not pass by skipping.
package miniotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/gantry-build/gantry/internal/testutil"
)

const (
	// startTimeout bounds the wait for a started server to serve requests.
	startTimeout = 60 * time.Second
	// stopTimeout is how long a SIGTERM'd server gets before SIGKILL.
	stopTimeout = 15 * time.Second
	// startAttempts is how often Start tries fresh ports when another
	// process took one between choosing it and MinIO listening on it.
	startAttempts = 3
	// logTail is how much of the server's output a failed test prints.
	logTail = 16 << 10
)

// Server is one MinIO server process on 127.0.0.1. Its methods other than
// Bucket and Client must be called from the test's goroutine.
type Server struct {
	// Endpoint is the S3 endpoint URL, http://127.0.0.1:PORT.
	Endpoint string
	// AccessKey and SecretKey are the server's root credentials.
	AccessKey, SecretKey string
	// Dir is the server's data directory.
	Dir string

	t           testing.TB
	bin         string
	addr        string // host:port of the S3 API
	consoleAddr string // host:port of the (disabled) console
	log         *testutil.SyncBuffer

	mu     sync.Mutex
	proc   *process // nil while stopped
	client *minio.Client
}

// process is one run of the server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result, valid once exited is closed
}

// Start starts a MinIO server and waits until it serves S3 requests with
// its credentials. It is stopped when t ends; if t failed, the end of its
// output is logged.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := binary(t)
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		s, err := newServer(t, bin)
		if err != nil {
			t.Fatalf("miniotest: %v", err)
		}
		err = s.launch()
		if err == nil {
			t.Cleanup(s.cleanup)
			return s
		}
		lastErr = err
		// Another process took a port between freePort and MinIO's listen.
		if !strings.Contains(s.log.String(), "address already in use") {
			break
		}
	}
	t.Fatalf("miniotest: %v", lastErr)
	return nil
}

func newServer(t testing.TB, bin string) (*Server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	consoleAddr, err := freeAddr()
	for err == nil && consoleAddr == addr {
		consoleAddr, err = freeAddr()
	}
	if err != nil {
		return nil, err
	}
	return &Server{
		Endpoint:    "http://" + addr,
		AccessKey:   "gantry" + randomHex(8),
		SecretKey:   randomHex(20),
		Dir:         t.TempDir(),
		t:           t,
		bin:         bin,
		addr:        addr,
		consoleAddr: consoleAddr,
		log:         &testutil.SyncBuffer{},
	}, nil
}

// binary finds the minio binary, or skips (fails under CI=true) the test.
func binary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	var candidates []string
	if root, err := repoRoot(); err == nil {
		candidates = append(candidates, filepath.Join(root, ".tools", "bin", "minio"))
	}
	for _, gopath := range filepath.SplitList(build.Default.GOPATH) {
		candidates = append(candidates, filepath.Join(gopath, "bin", "minio"))
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return c
		}
	}
	msg := fmt.Sprintf("miniotest: no minio binary on PATH or at %s (scripts/install-test-deps.sh installs it)", strings.Join(candidates, ", "))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI=true, so not skipping")
	}
	t.Skip(msg)
	return ""
}

// repoRoot returns the directory holding go.mod above the working
// directory (a package directory, under go test).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port)), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails, per the crypto/rand documentation
	return hex.EncodeToString(b)
}

// launch starts the server process on s's ports and directory and waits
// until it serves requests. On failure the process is gone.
func (s *Server) launch() error {
	cmd := exec.Command(s.bin, "server", s.Dir, "--address", s.addr, "--console-address", s.consoleAddr, "--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_UPDATE=off",
		"MINIO_BROWSER=off",
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
	)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = s.log, s.log
	// Own process group; Pdeathsig: the server dies with the test binary,
	// even when that is killed by a timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	if err := s.waitReady(p); err != nil {
		p.kill()
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// waitReady polls until the server answers /minio/health/live and lists
// buckets with its credentials (live comes first; S3 calls can fail a
// moment longer while the server initializes).
func (s *Server) waitReady(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	httpc := &http.Client{Timeout: 2 * time.Second}
	client, err := s.newClient()
	if err != nil {
		return err
	}
	last := "no answer yet"
	for {
		if resp, err := httpc.Get(s.Endpoint + "/minio/health/live"); err != nil {
			last = err.Error()
		} else {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				last = "health: " + resp.Status
			} else {
				lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := client.ListBuckets(lctx)
				lcancel()
				if err == nil {
					return nil
				}
				last = "listing buckets: " + err.Error()
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("minio exited at start (%v):\n%s", p.err, tail(s.log.String()))
		case <-ctx.Done():
			return fmt.Errorf("minio did not serve requests within %v (last: %s):\n%s", startTimeout, last, tail(s.log.String()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Server) newClient() (*minio.Client, error) {
	c, err := minio.New(s.addr, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure: false,
	})
	if err != nil {
		return nil, fmt.Errorf("minio client for %s: %w", s.Endpoint, err)
	}
	return c, nil
}

// Env returns the environment entries that give a process the server's
// credentials the standard way: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
func (s *Server) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey}
}

// Setenv puts the server's credentials (Env) into the environment of the
// test t, as a process the test starts, or a store it opens, reads them.
func (s *Server) Setenv(t testing.TB) {
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// Client returns a client of the server with its root credentials.
func (s *Server) Client() *minio.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		c, err := s.newClient()
		if err != nil {
			// minio.New fails only on a malformed endpoint, and ours is
			// host:port we chose.
			panic(err)
		}
		s.client = c
	}
	return s.client
}

var bucketCounter atomic.Int64

// Bucket creates a fresh, empty bucket and returns its name. It fails t
// (which may be a subtest of the one that started the server) on error.
func (s *Server) Bucket(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("gantry-test-%d-%s", bucketCounter.Add(1), randomHex(4))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client().MakeBucket(ctx, name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("miniotest: creating bucket %s on %s: %v", name, s.Endpoint, err)
	}
	return name
}

// Stop ends the server with SIGTERM (SIGKILL after a while) and waits until
// it is gone. The data directory stays, for Restart.
func (s *Server) Stop() {
	s.t.Helper()
	p := s.take()
	if p == nil {
		s.t.Fatalf("miniotest: Stop: the server is not running")
	}
	if !p.stop() {
		s.t.Logf("miniotest: minio ignored SIGTERM for %v; killed it", stopTimeout)
	}
}

// Kill ends the server with SIGKILL, as a crash would, and waits until it
// is gone. The data directory stays, for Restart.
func (s *Server) Kill() {
	s.t.Helper()
	p := s.take()
	if p == nil {
		s.t.Fatalf("miniotest: Kill: the server is not running")
	}
	p.kill()
}

// Restart starts the stopped (or killed) server again on the same address,
// credentials and data directory, and waits until it serves requests.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	running := s.proc != nil
	s.mu.Unlock()
	if running {
		s.t.Fatalf("miniotest: Restart: the server is still running; Stop or Kill it first")
	}
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if err = s.launch(); err == nil {
			return
		}
		// The old process's port can take a moment to be free again.
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	s.t.Fatalf("miniotest: restarting: %v", err)
}

// take detaches the running process from s.
func (s *Server) take() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	s.proc = nil
	return p
}

func (s *Server) cleanup() {
	if p := s.take(); p != nil {
		select {
		case <-p.exited:
			s.t.Errorf("miniotest: minio exited before the test ended (%v)", p.err)
		default:
			p.stop()
		}
	}
	if s.t.Failed() {
		s.t.Logf("minio output:\n%s", tail(s.log.String()))
	}
}

// stop sends SIGTERM, then SIGKILL after stopTimeout; it reports whether
// SIGTERM sufficed.
func (p *process) stop() bool {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(stopTimeout):
		p.kill()
		return false
	}
}

func (p *process) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

func tail(s string) string {
	if len(s) > logTail {
		return "...\n" + s[len(s)-logTail:]
	}
	return s
}
