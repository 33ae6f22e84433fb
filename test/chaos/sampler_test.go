package chaos

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-build/gantry/internal/testutil/cluster"
)

// Bounds on each Gantry process over the run (binaries built with -race
// use several times the memory of plain ones).
const (
	maxRSS        = 2 << 30
	maxFDs        = 2000
	maxGoroutines = 10000
	// sampleEvery is how often the processes are sampled.
	sampleEvery = 5 * time.Second
	// restSettle is how long the farm idles before its state at rest is
	// taken after the run.
	restSettle = 5 * time.Second
)

// usage is one process's largest resident memory, open files and
// goroutines seen, and the samples taken.
type usage struct {
	rss, fds, goroutines int64
	samples              int
}

// sampler reads /proc and /metrics of every Gantry process periodically.
type sampler struct {
	procs []*cluster.Proc

	mu  sync.Mutex
	max map[string]*usage
}

func (s *sampler) run(stop <-chan struct{}) {
	s.max = map[string]*usage{}
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

func (s *sampler) sample() {
	for _, p := range s.procs {
		pid := p.PID()
		if pid == 0 || !p.Running() || procState(pid) == "T" {
			continue
		}
		u := usage{rss: rssOf(pid), fds: fdsOf(pid)}
		if g, err := cluster.Gauge(p.HTTPAddr, "go_goroutines"); err == nil {
			u.goroutines = int64(g)
		}
		s.mu.Lock()
		m := s.max[p.Name]
		if m == nil {
			m = &usage{}
			s.max[p.Name] = m
		}
		m.rss, m.fds, m.goroutines = max(m.rss, u.rss), max(m.fds, u.fds), max(m.goroutines, u.goroutines)
		m.samples++
		s.mu.Unlock()
	}
}

// check returns a line per process over a bound, and a summary of all.
func (s *sampler) check() (over []string, summary string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.max))
	for n := range s.max {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		m := s.max[n]
		fmt.Fprintf(&b, "%s: rss %d MiB, %d fds, %d goroutines (%d samples); ", n, m.rss>>20, m.fds, m.goroutines, m.samples)
		if m.rss > maxRSS || m.fds > maxFDs || m.goroutines > maxGoroutines {
			over = append(over, fmt.Sprintf("%s went over a bound: rss %d MiB (bound %d), %d fds (bound %d), %d goroutines (bound %d)",
				n, m.rss>>20, maxRSS>>20, m.fds, maxFDs, m.goroutines, maxGoroutines))
		}
	}
	return over, b.String()
}

// atRest is each running process's open files and goroutines now, for
// comparing the idle farm before the load with the idle farm after it.
// Pools are left out: idle HTTP connections (to the object store, kept
// up to its transport's limits; one file and two goroutines each) and
// gRPC's stream workers.
func (s *sampler) atRest() map[string]usage {
	out := map[string]usage{}
	for _, p := range s.procs {
		pid := p.PID()
		if pid == 0 || !p.Running() {
			continue
		}
		g, idleConns, err := goroutinesOutsidePools(p.HTTPAddr)
		if err != nil {
			continue
		}
		out[p.Name] = usage{rss: rssOf(pid), fds: fdsOf(pid) - idleConns, goroutines: g}
	}
	return out
}

// goroutinesOutsidePools reads a process's goroutine profile: the
// goroutines outside the pools, and the HTTP connections it keeps.
func goroutinesOutsidePools(httpAddr string) (goroutines, httpConns int64, err error) {
	resp, err := http.Get("http://" + httpAddr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	goroutines, httpConns = countOutsidePools(string(b))
	return goroutines, httpConns, nil
}

// countOutsidePools reads a goroutine profile (debug=1).
func countOutsidePools(profile string) (goroutines, httpConns int64) {
	// Each record: "N @ addrs", then "#\t... func+off file:line" lines.
	for _, rec := range strings.Split(profile, "\n\n") {
		rec = strings.TrimSpace(rec)
		if strings.HasPrefix(rec, "goroutine profile:") {
			_, rec, _ = strings.Cut(rec, "\n")
		}
		head, _, _ := strings.Cut(rec, " @ ")
		n, err := strconv.ParseInt(head, 10, 64)
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(rec, "net/http.(*persistConn).readLoop"):
			httpConns += n
		case strings.Contains(rec, "net/http.(*persistConn).writeLoop"),
			strings.Contains(rec, "grpc.(*Server).serverWorker"):
		default:
			goroutines += n
		}
	}
	return goroutines, httpConns
}

// growth compares the idle farm after the run with the idle farm before
// it: a process (the same one, or the one started in its place) holding
// more than twice its open files or goroutines of before, and 100 more,
// leaks them (thousands of actions went through it). Resident memory is
// reported, not bounded: the Go runtime keeps freed memory for a while.
func growth(before, after map[string]usage) (over []leak, summary string) {
	names := make([]string, 0, len(after))
	for n := range after {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		a, ok := before[n]
		if !ok {
			continue
		}
		z := after[n]
		fmt.Fprintf(&b, "%s: %d→%d fds, %d→%d goroutines (outside pools), %d→%d MiB; ", n, a.fds, z.fds, a.goroutines, z.goroutines, a.rss>>20, z.rss>>20)
		leaks := func(was, is int64) bool { return is > 2*was && is > was+100 }
		if leaks(a.fds, z.fds) || leaks(a.goroutines, z.goroutines) {
			over = append(over, leak{n, fmt.Sprintf("%s holds more at rest after the run than before it: %d open files (was %d), %d goroutines (was %d), outside pools", n, z.fds, a.fds, z.goroutines, a.goroutines)})
		}
	}
	return over, b.String()
}

// leak is a process that holds more at rest after the run than before.
type leak struct{ name, msg string }

// dumpGoroutines saves the goroutines of the process named name (its
// /debug/pprof/goroutine?debug=1) next to its logs and returns the path.
func (s *sampler) dumpGoroutines(name string) (string, error) {
	for _, p := range s.procs {
		if p.Name != name {
			continue
		}
		resp, err := http.Get("http://" + p.HTTPAddr + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		path := filepath.Join(p.Dir, name+"-goroutines-at-rest.txt")
		return path, os.WriteFile(path, b, 0o644)
	}
	return "", fmt.Errorf("no process %s", name)
}

func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func fdsOf(pid int) int64 {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return int64(len(ents))
}

// procState is the state letter of /proc/PID/stat (R, S, T, Z...).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// actionProcesses returns the processes whose environment holds CHAOS_RUN=marker.
func actionProcesses(marker string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	needle := []byte("CHAOS_RUN=" + marker + "\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !strings.Contains(string(b), string(needle)) {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("pid %d %q", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
	}
	return out
}
