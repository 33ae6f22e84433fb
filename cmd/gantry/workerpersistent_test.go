package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

// jsonTool is a persistent worker in sh (JSON protocol): it answers each
// request with exit code 0.
const jsonTool = `while read -r line; do echo '{"exitCode":0,"output":"served"}'; done
`

// TestStandaloneWorkerPersistentPage runs two actions of one
// persistentWorkerKey on a standalone worker and reads its pool on
// /status/persistent-workers: one cold start, one warm request.
func TestStandaloneWorkerPersistentPage(t *testing.T) {
	wc := config.Default().Worker
	wc.ID, wc.Cores, wc.WorkDir = "w1", 1, t.TempDir()
	ctx, conn, addr, put := standaloneWorker(t, wc)
	putMsg := func(m proto.Message) digest.Digest { b, _ := proto.Marshal(m); return put(b) }
	tool := put([]byte(jsonTool))
	for i := range 2 {
		req := put([]byte("request " + string(rune('a'+i)) + "\n"))
		root := putMsg(&repb.Directory{Files: []*repb.FileNode{
			{Name: "req", Digest: req.Proto()},
			{Name: "tool.sh", Digest: tool.Proto(), NodeProperties: &repb.NodeProperties{Properties: []*repb.NodeProperty{{Name: "bazel_tool_input"}}}},
		}})
		plat := &repb.Platform{Properties: []*repb.Platform_Property{{Name: "persistentWorkerKey", Value: "shkey"}, {Name: "persistentWorkerProtocol", Value: "json"}}}
		cmd := putMsg(&repb.Command{Arguments: []string{"/bin/sh", "tool.sh", "@req"}, Platform: plat})
		action := putMsg(&repb.Action{CommandDigest: cmd.Proto(), InputRootDigest: root.Proto(), Platform: plat})
		resp, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: action.Proto()})
		if err != nil || client.CheckResponse(resp) != nil || resp.Result.GetExitCode() != 0 {
			t.Fatalf("Execute %d: %v %v", i, resp, err)
		}
	}
	var page string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, err := http.Get("http://" + addr + "/status/persistent-workers")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		page = string(b)
		if strings.Contains(page, "shkey") || time.Now().After(deadline) {
			break
		}
	}
	lines := strings.Split(strings.TrimSpace(page), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "KEY") || strings.Join(strings.Fields(lines[1])[:5], " ") != "shkey 1 1 1 50%" {
		t.Fatalf("/status/persistent-workers:\n%s\nwant key shkey with 1 process, 1 warm, 1 cold", page)
	}
}
