package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/config"
)

// The duration history a served farm learns is in its state store: the
// shapes page lists it, and still does after a restart on the same data
// directory.
func TestDurationHistorySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *config.Config) {
		c.DataDir = dir
		c.HTTPListen = "127.0.0.1:0"
		c.Status.Refresh = 0
	}
	f := startFarm(t, mod)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r := f.run(ctx, f.put(&repb.Directory{}), shCmd("echo learned > out.txt", "out.txt")); r.GetResult().GetExitCode() != 0 {
		t.Fatalf("the action failed: %v", r)
	}
	page := func(f *farm) string {
		t.Helper()
		r, err := http.Get("http://" + f.srv.HTTPAddr() + "/status/shapes")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	const row = "<tr><td>sh -c echo learned &gt; out.txt</td><td>-</td><td class=\"n\">1.0</td>"
	if p := page(f); !strings.Contains(p, row) {
		t.Fatalf("the shapes page lacks the action's shape %q:\n%s", row, p)
	}
	f.stop()
	f = startFarm(t, mod)
	if p := page(f); !strings.Contains(p, row) {
		t.Errorf("after a restart the shapes page lacks %q:\n%s", row, p)
	}
}
