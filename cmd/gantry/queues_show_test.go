package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
)

func TestQueuesShowAndStatusPage(t *testing.T) {
	srv := startServer(t, func(c *config.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.Scheduler.Fairness.Keys = []string{"user", "tool_invocation_id"}
	})
	submit := func(n int, path ...string) {
		for i := 0; i < n; i++ {
			d := digest.Compute(digest.SHA256, []byte(fmt.Sprint(path, i)))
			if _, err := srv.Scheduler().Submit(scheduler.SubmitRequest{ActionDigest: d, Invocation: path,
				Platform: platform.Properties{{Name: "OSFamily", Value: "linux"}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit(3, "alice", "build-1")
	submit(2, "alice", "build-2")
	submit(4, "bob", "")
	// One worker takes one of the actions.
	srv.Scheduler().RegisterWorker(scheduler.WorkerInfo{ID: "w1", Platform: platform.Worker{Cores: 1, AllowUnmatched: true}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a, err := srv.Scheduler().Poll(ctx, "w1", scheduler.Capacity{Cores: 1})
	if err != nil || a == nil {
		t.Fatalf("poll: %v %v", a, err)
	}

	out, err := run(t, "queues", "show", "--server", srv.GRPCAddr())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("gantry queues show:\n%s", out)
	row := func(name string) []string {
		re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s*$`)
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no row %q in:\n%s", name, out)
		}
		return m[1:]
	}
	if !strings.Contains(out, "invocation keys: user > tool_invocation_id") {
		t.Errorf("levels not named:\n%s", out)
	}
	total := row("(all)")
	if total[0]+"/"+total[1] != "8/1" {
		t.Errorf("root queued/executing %v, want 8/1", total)
	}
	// The first action leased is one of alice's or bob's (fairness between
	// users at equal counts): whichever it was shows executing 1, share 100%.
	alice, bob := row("user=alice"), row("user=bob")
	if alice[0] == "5" {
		if bob[0] != "3" || bob[1] != "1" || bob[2] != "100%" {
			t.Errorf("bob row %v", bob)
		}
	} else if alice[0] != "4" || alice[1] != "1" || bob[0] != "4" {
		t.Errorf("alice %v bob %v", alice, bob)
	}
	row("tool_invocation_id=build-1")
	row("tool_invocation_id=build-2")
	row("tool_invocation_id=(none)")

	out, err = run(t, "queues", "show", "--server", srv.GRPCAddr(), "--depth", "1")
	if err != nil || strings.Contains(out, "build-1") || !strings.Contains(out, "user=alice") {
		t.Errorf("--depth 1 (err %v):\n%s", err, out)
	}

	resp, err := http.Get("http://" + srv.HTTPAddr() + "/status/invocations")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "tool_invocation_id=build-2") {
		t.Errorf("status page:\n%s", body)
	}
	resp, err = http.Get("http://" + srv.HTTPAddr() + "/status/invocations?format=json")
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Keys        []string
		Invocations []struct {
			Path              []string
			Queued, Executing int
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&js)
	resp.Body.Close()
	if err != nil || len(js.Keys) != 2 || len(js.Invocations) != 6 {
		t.Fatalf("json: %v %+v", err, js)
	}
	if js.Invocations[0].Queued != 8 || js.Invocations[0].Executing != 1 {
		t.Errorf("json root %+v", js.Invocations[0])
	}
}
