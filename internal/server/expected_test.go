package server

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
)

// A finished operation's page sets its expected duration (learned from
// an earlier run of its shape) against its execution time, and still
// does after a restart, from the history record the execution service
// wrote when it finished.
func TestFinishedOperationShowsExpectedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *config.Config) {
		c.DataDir = dir
		c.HTTPListen = "127.0.0.1:0"
		c.Status.Refresh = 0
	}
	f := startFarm(t, mod)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(i int) string {
		t.Helper()
		// Its own input root: the same shape, not the same action.
		root := f.put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "d" + strconv.Itoa(i), Digest: f.put(&repb.Directory{}).Proto()}}})
		ad := f.put(&repb.Action{CommandDigest: f.put(shCmd("sleep 0.2")).Proto(), InputRootDigest: root.Proto(), DoNotCache: true})
		resp, name, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
		if err != nil || resp.GetResult().GetExitCode() != 0 {
			t.Fatalf("run %d: %v %v", i, resp, err)
		}
		return name
	}
	run(1)
	name := run(2)
	want := regexp.MustCompile(`<p id="expected">Expected [\d.]+m?s \(the duration history of its action shape\); executed in [\d.]+m?s, \d+\.\d\d× expected\.</p>`)
	page := func(f *farm) string {
		t.Helper()
		r, err := http.Get("http://" + f.srv.HTTPAddr() + "/status/operation?name=" + url.QueryEscape(name))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	if p := page(f); !want.MatchString(p) {
		t.Fatalf("the finished operation's page lacks %s:\n%s", want, p)
	}
	f.stop()
	f = startFarm(t, mod)
	if p := page(f); !want.MatchString(p) {
		t.Errorf("after a restart the page lacks %s:\n%s", want, p)
	}
}
