package cluster

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
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
	// haproxyStartTimeout bounds the wait for HAProxy to answer on its stats
	// socket and for its health checks to see the backends up.
	haproxyStartTimeout = 30 * time.Second
	// haproxyStartAttempts is how often a start on fresh ports is tried when
	// another process took the port in between.
	haproxyStartAttempts = 3
)

// HAProxy is one HAProxy balancing TCP connections (gRPC's HTTP/2 passes
// through untouched) over a set of loopback backends, like a production load
// balancer in front of several `gantry serve --role frontend`.
type HAProxy struct {
	// Addr is the host:port clients connect to.
	Addr string
	// Backends are the backends' host:port, named fe1, fe2, ... in order.
	Backends []string

	socket  string // the stats socket (admin level)
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error
}

// HAProxyBinary returns HAProxy's path (Debian's /usr/sbin/haproxy, else PATH); it
// skips the test when it is missing, and fails it under CI=true.
func HAProxyBinary(t testing.TB) string {
	t.Helper()
	if st, err := os.Stat("/usr/sbin/haproxy"); err == nil && st.Mode()&0o111 != 0 {
		return "/usr/sbin/haproxy"
	}
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	msg := "haproxy not found at /usr/sbin/haproxy or on PATH (run scripts/install-test-deps.sh: Debian's haproxy package)"
	if InCI() {
		t.Fatal(msg + "; CI=true, so a missing balancer is a failure")
	}
	t.Skip(msg)
	return ""
}

// haproxyConfig is HAProxy's configuration: TCP mode; short connect and check
// timeouts so a dead backend is noticed within about a second (two failed checks
// 300ms apart) and a connection to it is retried on another one (retries,
// redispatch); long client and server timeouts, since Bazel's and workers' gRPC
// connections idle for minutes.
const haproxyConfig = `global
    maxconn 4096
    stats socket %s mode 600 level admin

defaults
    mode tcp
    timeout connect 1s
    timeout check 1s
    timeout client 10m
    timeout server 10m
    option redispatch
    retries 3

frontend gantry
    bind %s
    default_backend frontends

backend frontends
    balance roundrobin
%s`

// StartHAProxy starts HAProxy on a free loopback port in front of backends and waits
// until its health checks see every backend up. It is stopped when the test ends.
func StartHAProxy(t testing.TB, dir string, backends ...string) *HAProxy {
	t.Helper()
	bin := HAProxyBinary(t)
	var lastErr error
	for attempt := 1; attempt <= haproxyStartAttempts; attempt++ {
		h := &HAProxy{
			Addr:     FreeAddr(t),
			Backends: backends,
			socket:   filepath.Join(dir, fmt.Sprintf("admin-%d.sock", attempt)),
			logPath:  filepath.Join(dir, fmt.Sprintf("haproxy-%d.log", attempt)),
			exited:   make(chan struct{}),
		}
		var servers strings.Builder
		for i, b := range backends {
			fmt.Fprintf(&servers, "    server fe%d %s check inter 300ms fall 2 rise 1\n", i+1, b)
		}
		cfg := filepath.Join(dir, fmt.Sprintf("haproxy-%d.cfg", attempt))
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(haproxyConfig, h.socket, h.Addr, servers.String())), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := h.launch(t, bin, cfg); err != nil {
			t.Fatal(err)
		}
		err := h.waitUp(haproxyStartTimeout)
		if err == nil {
			t.Cleanup(func() { h.stop(t) })
			t.Logf("haproxy on %s in front of %v", h.Addr, backends)
			return h
		}
		lastErr = err
		h.kill()
		if !strings.Contains(ReadTail(h.logPath, 4096), "cannot bind socket") {
			break
		}
	}
	t.Fatalf("haproxy did not start: %v\n%s", lastErr, ReadTail(filepath.Join(dir, fmt.Sprintf("haproxy-%d.log", haproxyStartAttempts)), 4096))
	return nil
}

func (h *HAProxy) launch(t testing.TB, bin, cfg string) error {
	logFile, err := os.Create(h.logPath)
	if err != nil {
		return err
	}
	// -db: stay in the foreground, one process, no daemon.
	h.cmd = exec.Command(bin, "-db", "-f", cfg)
	h.cmd.Stdout, h.cmd.Stderr = logFile, logFile
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	t.Logf("starting %s -db -f %s", bin, cfg)
	if err := h.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting haproxy: %w", err)
	}
	go func() {
		h.err = h.cmd.Wait()
		logFile.Close()
		close(h.exited)
	}()
	return nil
}

// waitUp polls the stats socket until every backend is up.
func (h *HAProxy) waitUp(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		if err := h.waitBackendsOnce(len(h.Backends)); err == nil {
			return nil
		} else {
			last = err.Error()
		}
		select {
		case <-h.exited:
			return fmt.Errorf("haproxy exited at start (%v):\n%s", h.err, ReadTail(h.logPath, 4096))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("haproxy's backends not all up within %v (last: %s)", timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitBackendsOnce returns nil when at least n backends are up.
func (h *HAProxy) waitBackendsOnce(n int) error {
	st, err := h.Stats()
	if err != nil {
		return err
	}
	up := 0
	for _, s := range st {
		if strings.HasPrefix(s.Status, "UP") {
			up++
		}
	}
	if up < n {
		return fmt.Errorf("%d of %d backends up: %v", up, len(st), st)
	}
	return nil
}

// WaitBackendUp waits until HAProxy's checks see the named backend (fe1, fe2, ...) up.
func (h *HAProxy) WaitBackendUp(t testing.TB, name string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, err := h.Stats()
		if err == nil && strings.HasPrefix(st[name].Status, "UP") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy does not see backend %s up within %v (stats %v, %v)", name, timeout, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// HAProxyServer is one backend's line of HAProxy's `show stat`.
type HAProxyServer struct {
	Status  string // UP, DOWN, "UP 1/2", ...
	Current int    // connections open now
	Total   int    // connections since start
}

func (s HAProxyServer) String() string {
	return fmt.Sprintf("%s, %d open, %d in all", s.Status, s.Current, s.Total)
}

// command sends one command to HAProxy's stats socket and returns the answer.
func (h *HAProxy) command(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", h.socket)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(cmd + "\n")); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return "", fmt.Errorf("haproxy's answer to %q: %w", cmd, err)
	}
	return string(b), nil
}

// Sessions returns the backend (fe1, fe2, ...) of each connection HAProxy relays
// now, by the client's source port.
func (h *HAProxy) Sessions() (map[int]string, error) {
	out, err := h.command("show sess")
	if err != nil {
		return nil, err
	}
	bySrc := map[int]string{}
	for _, line := range strings.Split(out, "\n") {
		var src, srv string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "src="); ok {
				src = v
			} else if v, ok := strings.CutPrefix(f, "srv="); ok {
				srv = v
			}
		}
		_, port, err := net.SplitHostPort(src)
		if err != nil || !strings.HasPrefix(srv, "fe") {
			continue
		}
		if p, err := strconv.Atoi(port); err == nil {
			bySrc[p] = srv
		}
	}
	return bySrc, nil
}

// Stats returns the backends' state by name (fe1, fe2, ...) from the stats socket.
func (h *HAProxy) Stats() (map[string]HAProxyServer, error) {
	text, err := h.command("show stat")
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(strings.NewReader(text))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("reading haproxy's show stat: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("haproxy's show stat is empty")
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[strings.TrimPrefix(strings.TrimSpace(name), "# ")] = i
	}
	for _, name := range []string{"pxname", "svname", "scur", "stot", "status"} {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("haproxy's show stat has no %s column: %v", name, rows[0])
		}
	}
	out := map[string]HAProxyServer{}
	for _, row := range rows[1:] {
		if len(row) <= col["status"] || row[col["pxname"]] != "frontends" {
			continue
		}
		name := row[col["svname"]]
		if name == "BACKEND" {
			continue
		}
		cur, _ := strconv.Atoi(row[col["scur"]])
		tot, _ := strconv.Atoi(row[col["stot"]])
		out[name] = HAProxyServer{Status: row[col["status"]], Current: cur, Total: tot}
	}
	return out, nil
}

// stop ends HAProxy (SIGTERM: a hard stop), failing the test if it had exited by itself.
func (h *HAProxy) stop(t testing.TB) {
	select {
	case <-h.exited:
		t.Errorf("haproxy exited before the test ended: %v\n%s", h.err, ReadTail(h.logPath, 4096))
		return
	default:
	}
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(stopTimeout):
		h.kill()
	}
	if t.Failed() {
		t.Logf("haproxy log (%s):\n%s", h.logPath, ReadTail(h.logPath, 8192))
	}
}

func (h *HAProxy) kill() {
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	<-h.exited
}
