package server

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/chromedp/chromedp"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/testutil/cspwatch"
)

// startLivePage starts the sleep-interleaved action on a farm with its
// HTTP port and returns the farm, the operation's name and the file that
// lets the action end.
func startLivePage(ctx context.Context, t *testing.T) (*farm, string, string) {
	t.Helper()
	f := observedFarm(t, quietLogger(), func(c *config.Config) { c.Status.Refresh = config.Duration(time.Second) })
	release := filepath.Join(t.TempDir(), "release")
	ad := f.put(&repb.Action{CommandDigest: f.put(liveAction(release)).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
	exec, md := startLive(ctx, t, f.conn, ad)
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644); exec.CloseSend() })
	// The worker has written the first line once a reader sees it.
	readUntil(ctx, t, f.conn, md.StdoutStreamName, "first\n")
	ops := f.srv.Scheduler().List()
	if len(ops) != 1 {
		t.Fatalf("%d operations, want the running one", len(ops))
	}
	return f, ops[0].Name, release
}

// /status/output sends a running action's output as plain text as it
// comes (a chunked response a browser shows without script), ending when
// the action ends.
func TestLiveOutputPageStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, op, release := startLivePage(ctx, t)
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+f.srv.HTTPAddr()+"/status/output?stream=stdout&name="+url.QueryEscape(op), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if rest, err := r.ReadString(0); rest != "second\n" {
		t.Fatalf("the rest %q (%v), want the second line, then the end", rest, err)
	}
}

// The page of a running operation shows its output so far in Chromium,
// and refreshes itself (no script).
func TestLiveOutputOnOperationPageInChromium(t *testing.T) {
	browser := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f, op, _ := startLivePage(ctx, t)
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browser),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.UserDataDir(t.TempDir()))
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	csp, err := cspwatch.Start(bctx)
	if err != nil {
		t.Fatal(err)
	}
	page := "http://" + f.srv.HTTPAddr() + "/status/operation?name=" + url.QueryEscape(op)
	if err := chromedp.Do(bctx, chromedp.Navigate(page)); err != nil {
		t.Fatal(err)
	}
	out, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#live-stdout")))
	if err != nil {
		t.Fatalf("reading the live output on the operation page: %v", err)
	}
	errOut, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#live-stderr")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "first" || strings.TrimSpace(errOut) != "oops" {
		t.Errorf("live output on the page: stdout %q, stderr %q; want the first line and the warning", out, errOut)
	}
	refresh, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`meta[http-equiv="refresh"]`), "content"))
	if err != nil || !refresh.Exists || refresh.Value == "" {
		t.Errorf("the running operation's page does not refresh itself: %+v, %v", refresh, err)
	}
	csp.Check(bctx, t, "the operation page with live output")
}
