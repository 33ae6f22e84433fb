package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every Linux Gantry runs on).
const clockTicks = 100

// procSample is a server process's state read from /proc.
type procSample struct {
	CPU       time.Duration // user + system time so far
	RSS, Peak int64         // VmRSS and VmHWM, bytes
	Files     int           // open file descriptors
}

// readProc samples process pid; it returns the zero sample for pid 0.
func readProc(pid int) (procSample, error) {
	var s procSample
	if pid == 0 {
		return s, nil
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("reading the server's CPU time (--server-pid %d): %w", pid, err)
	}
	// The fields after the command name (in parentheses, which may hold
	// spaces): utime and stime are the 14th and 15th of the line.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 13 {
		return s, fmt.Errorf("/proc/%d/stat has too few fields", pid)
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	s.CPU = time.Duration(ut+st) * time.Second / clockTicks
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			s.RSS = kb << 10
		case "VmHWM":
			s.Peak = kb << 10
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err == nil {
		s.Files = len(fds)
	}
	return s, nil
}

// pageTime is how long one page took to serve and how big it was.
type pageTime struct {
	Page  string  `json:"page"`
	Ms    float64 `json:"ms"`
	Bytes int     `json:"bytes"`
	Error string  `json:"error,omitempty"`
}

// scalePages are the pages timed at the loaded state: the HTML an
// operator's browser gets, and the text and JSON forms scripts read.
var scalePages = []string{
	"/status", "/status/invocations?format=html", "/status/invocations",
	"/status/fairness?format=html", "/status/fairness", "/metrics",
}

// timePages fetches every page of scalePages from the server's HTTP
// address, and `gantry queues show` with binary.
func timePages(ctx context.Context, httpAddr, grpcAddr, binary string) []pageTime {
	var out []pageTime
	c := &http.Client{Timeout: time.Minute}
	for _, p := range scalePages {
		pt := pageTime{Page: p}
		start := time.Now()
		body, err := get(ctx, c, "http://"+httpAddr+p)
		pt.Ms, pt.Bytes = ms(time.Since(start)), len(body)
		if err != nil {
			pt.Error = err.Error()
		}
		out = append(out, pt)
	}
	if binary != "" {
		pt := pageTime{Page: "gantry queues show"}
		start := time.Now()
		b, err := exec.CommandContext(ctx, binary, "queues", "show", "--server", grpcAddr).CombinedOutput()
		pt.Ms, pt.Bytes = ms(time.Since(start)), len(b)
		if err != nil {
			pt.Error = fmt.Sprintf("%v: %s", err, b)
		}
		out = append(out, pt)
	}
	return out
}

// get fetches url and returns its body; a status other than 200 is an
// error.
func get(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	return body, err
}

// metricValue is the value of an unlabelled series in a Prometheus text
// exposition (-1 when absent).
func metricValue(text []byte, name string) float64 {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// goroutines reads go_goroutines from the server's /metrics (-1 when it
// cannot).
func goroutines(ctx context.Context, httpAddr string) float64 {
	if httpAddr == "" {
		return -1
	}
	body, err := get(ctx, &http.Client{Timeout: time.Minute}, "http://"+httpAddr+"/metrics")
	if err != nil {
		return -1
	}
	return metricValue(body, "go_goroutines")
}

// saveProfile fetches a /debug/pprof profile of the server into path.
func saveProfile(ctx context.Context, httpAddr, profile, path string) error {
	body, err := get(ctx, &http.Client{Timeout: 10 * time.Minute}, "http://"+httpAddr+"/debug/pprof/"+profile)
	if err != nil {
		return fmt.Errorf("fetching the server's %s profile: %w (with auth.enabled the HTTP port needs the admin permission for /debug/pprof/)", profile, err)
	}
	return os.WriteFile(path, body, 0o644)
}

// memStats is the server's runtime.MemStats at one moment, as
// /debug/pprof/heap?debug=1 prints it: where its resident bytes are.
type memStats struct {
	HeapAlloc, HeapInuse, HeapIdle, HeapReleased, Stack, MSpan, GCSys, NextGC, Sys int64
}

// readMemStats fetches the server's MemStats (the zero value when it
// cannot).
func readMemStats(ctx context.Context, httpAddr string) memStats {
	var m memStats
	body, err := get(ctx, &http.Client{Timeout: time.Minute}, "http://"+httpAddr+"/debug/pprof/heap?debug=1")
	if err != nil {
		return m
	}
	fields := map[string]*int64{"HeapAlloc": &m.HeapAlloc, "HeapInuse": &m.HeapInuse, "HeapIdle": &m.HeapIdle, "HeapReleased": &m.HeapReleased,
		"Stack": &m.Stack, "MSpan": &m.MSpan, "GCSys": &m.GCSys, "NextGC": &m.NextGC, "Sys": &m.Sys}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if p := fields[k]; ok && p != nil {
			// "Stack = inuse / sys": the first number.
			*p, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return m
}
