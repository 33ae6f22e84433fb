// Package cluster starts the processes of a multi-node Gantry for tests that
// run it as operators do (test/chaos): `gantry serve` and `gantry worker`
// subprocesses that a test kills, stops and starts again on the same ports
// and directories (Proc), HAProxy in front of the frontends (HAProxy), and
// a TCP proxy whose network the test cuts (Proxy).
//
// Prerequisites missing on a developer machine skip the test; under
// CI=true they fail it (Require), as the end-to-end tests do.
package cluster

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// InCI tells whether missing prerequisites must fail tests instead of skipping them.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireTool returns the path of the program name (on PATH, or the first of
// paths that exists); when it is missing it skips t, or fails it under
// CI=true. install says how to get it.
func RequireTool(t testing.TB, name, install string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found on PATH (%s)", name, install)
	if InCI() {
		t.Fatal(msg + "; CI=true, so a missing prerequisite is a failure")
	}
	t.Skip(msg)
	return ""
}

// FreeAddr returns 127.0.0.1:PORT for a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
}

// ReadTail returns at most the last n bytes of the file at path.
func ReadTail(path string, n int64) string {
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

var httpClient = &http.Client{Timeout: 2 * time.Second}

// Healthz returns the body of GET /healthz on httpAddr, or the error's text.
func Healthz(httpAddr string) string {
	resp, err := httpClient.Get("http://" + httpAddr + "/healthz")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Gauge returns the value of an unlabelled metric on httpAddr's /metrics.
func Gauge(httpAddr, name string) (float64, error) {
	resp, err := httpClient.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics on %s: %s", httpAddr, resp.Status)
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
	return 0, fmt.Errorf("no %s on %s/metrics", name, httpAddr)
}
