package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

var (
	pwtoolOnce sync.Once
	pwtoolBin  []byte
	pwtoolErr  error
)

// pwtool builds the persistent worker tool written for these tests
// (internal/testutil/pwtool) once per test process.
func pwtool(t *testing.T) []byte {
	t.Helper()
	pwtoolOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pwtool-")
		if err != nil {
			pwtoolErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "pwtool")
		if b, err := exec.Command("go", "build", "-o", out, "../testutil/pwtool").CombinedOutput(); err != nil {
			pwtoolErr = fmt.Errorf("go build ../testutil/pwtool: %v\n%s", err, b)
			return
		}
		pwtoolBin, pwtoolErr = os.ReadFile(out)
	})
	if pwtoolErr != nil {
		t.Fatal(pwtoolErr)
	}
	return pwtoolBin
}

// pwAction is an action in the shape Bazel 6+ sends with
// --experimental_remote_mark_tool_inputs: the tool's files carry the
// bazel_tool_input node property, the platform persistentWorkerKey, and
// the arguments are TOOL TOOL_ARGS... @REQUEST_FILE.
type pwAction struct {
	root digest.Digest
	cmd  *repb.Command
	want string // the output's expected content
}

func (f *farm) pwAction(t *testing.T, n int, key string, toolArgs []string, props map[string]string, extra ...string) pwAction {
	t.Helper()
	tool := f.putBytes(pwtool(t))
	src := fmt.Sprintf("source file %d\n", n)
	srcD := f.putBytes([]byte(src))
	params := strings.Join(append([]string{"--in", fmt.Sprintf("src/%d.txt", n), "--out", fmt.Sprintf("bazel-out/bin/%d.out", n)}, extra...), "\n") + "\n"
	paramsD := f.putBytes([]byte(params))
	toolDir := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: "pwtool", Digest: tool.Proto(), IsExecutable: true,
		NodeProperties: &repb.NodeProperties{Properties: []*repb.NodeProperty{{Name: "bazel_tool_input", Value: ""}}}}}})
	srcDir := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: fmt.Sprintf("%d.txt", n), Digest: srcD.Proto()}}})
	paramsDir := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: fmt.Sprintf("%d.params", n), Digest: paramsD.Proto()}}})
	outDir := f.put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "params", Digest: paramsDir.Proto()}}})
	root := f.put(&repb.Directory{Directories: []*repb.DirectoryNode{
		{Name: "bazel-out", Digest: outDir.Proto()}, {Name: "src", Digest: srcDir.Proto()}, {Name: "tools", Digest: toolDir.Proto()}}})
	plat := &repb.Platform{}
	if key != "" {
		plat.Properties = append(plat.Properties, &repb.Platform_Property{Name: "persistentWorkerKey", Value: key})
	}
	for k, v := range props {
		plat.Properties = append(plat.Properties, &repb.Platform_Property{Name: k, Value: v})
	}
	cmd := &repb.Command{
		Arguments:   append(append([]string{"tools/pwtool"}, toolArgs...), fmt.Sprintf("@bazel-out/params/%d.params", n)),
		OutputPaths: []string{fmt.Sprintf("bazel-out/bin/%d.out", n)},
		Platform:    plat,
	}
	return pwAction{root: root, cmd: cmd, want: strings.ToUpper(src)}
}

var pwOutput = regexp.MustCompile(`^pid=(\d+) uid=(\d+) start=(\d+) requests=(\d+)\n$`)

// runPW runs a, checks its output and returns what the tool said (pid,
// start time, requests served).
func (f *farm) runPW(ctx context.Context, t *testing.T, a pwAction) (pid, start string, requests int) {
	resp := f.run(ctx, a.root, a.cmd, func(act *repb.Action) { act.Platform = a.cmd.Platform })
	if err := client.CheckResponse(resp); err != nil {
		t.Error(err)
		return
	}
	stderr := f.read(resp.Result.StderrDigest)
	if resp.Result.ExitCode != 0 {
		t.Errorf("exit code %d, stderr %q", resp.Result.ExitCode, stderr)
		return
	}
	if len(resp.Result.OutputFiles) != 1 || resp.Result.OutputFiles[0].Path != a.cmd.OutputPaths[0] {
		t.Errorf("outputs %v, want %s", resp.Result.OutputFiles, a.cmd.OutputPaths[0])
		return
	}
	if got := f.read(resp.Result.OutputFiles[0].Digest); got != a.want {
		t.Errorf("%s = %q, want %q", a.cmd.OutputPaths[0], got, a.want)
	}
	m := pwOutput.FindStringSubmatch(stderr)
	if m == nil {
		t.Errorf("stderr %q is not the tool's answer", stderr)
		return
	}
	fmt.Sscan(m[4], &requests)
	return m[1], m[3], requests
}

// TestPersistentWorkers runs 200 actions with one key on a worker with 2
// slots: at most one process per slot starts, and every output is right,
// in both protocols.
func TestPersistentWorkers(t *testing.T) {
	f := startFarm(t, func(c *config.Config) { c.HTTPListen = "127.0.0.1:0" }) // 2 cores
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name     string
		n        int
		toolArgs []string
		props    map[string]string
	}{
		{"proto", 200, []string{"--startup-delay", "50ms"}, nil},
		{"json", 60, []string{"--json"}, map[string]string{"persistentWorkerProtocol": "json"}},
		{"multiplex", 60, []string{"--multiplex"}, map[string]string{"supports-multiplex-workers": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "key-" + tc.name
			actions := make([]pwAction, tc.n)
			for i := range actions {
				actions[i] = f.pwAction(t, i, key, tc.toolArgs, tc.props)
			}
			var mu sync.Mutex
			pids, starts := map[string]bool{}, map[string]bool{}
			maxRequests := 0
			var wg sync.WaitGroup
			work := make(chan pwAction)
			for range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for a := range work {
						pid, start, n := f.runPW(ctx, t, a)
						mu.Lock()
						pids[pid], starts[start] = true, true
						maxRequests = max(maxRequests, n)
						mu.Unlock()
					}
				}()
			}
			for _, a := range actions {
				work <- a
			}
			close(work)
			wg.Wait()
			if t.Failed() {
				return
			}
			if len(pids) > 2 || len(starts) > 2 {
				t.Errorf("%d actions started %d processes (%d start times); want at most one per slot (2)", tc.n, len(pids), len(starts))
			}
			if maxRequests < tc.n/2 {
				t.Errorf("the busiest process served %d requests of %d; processes are not reused", maxRequests, tc.n)
			}
			t.Logf("%d actions on %d processes, the busiest served %d", tc.n, len(pids), maxRequests)
		})
	}
	// The server's status page shows the embedded worker's pool by key.
	code, page := httpGet(t, "http://"+f.srv.HTTPAddr()+"/status/persistent-workers")
	if code != 200 {
		t.Fatalf("/status/persistent-workers: %d\n%s", code, page)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(page), "\n")[1:] {
		if fs := strings.Fields(line); len(fs) >= 4 {
			rows[fs[0]] = fs
		}
	}
	for key, n := range map[string]int{"key-proto": 200, "key-json": 60, "key-multiplex": 60} {
		fs, ok := rows[key]
		if !ok {
			t.Errorf("/status/persistent-workers has no row for %s:\n%s", key, page)
			continue
		}
		warm, _ := strconv.Atoi(fs[2])
		cold, _ := strconv.Atoi(fs[3])
		if warm+cold != n || cold > 2 {
			t.Errorf("/status/persistent-workers: %s warm %d, cold %d; want %d requests, at most 2 cold:\n%s", key, warm, cold, n, page)
		}
	}
}
