package server

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gantry-build/gantry/internal/testutil/cspwatch"
)

// chromiumPath finds headless Chromium; under CI=true its absence fails
// the test, elsewhere it skips.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed; scripts/install-test-deps.sh installs it (Debian package chromium)")
	}
	t.Skip("chromium is not installed (Debian package chromium); skipping the browser test")
	return ""
}

// TestStatusPageInChromium reads the status pages in headless Chromium as
// an operator would, drains the worker with its button, and takes a
// screenshot of each page. GANTRY_UPDATE_SCREENSHOTS=1 writes them to
// docs/images/.
func TestStatusPageInChromium(t *testing.T) {
	browser := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startScenario(t, ctx)
	defer s.finish(t, ctx)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 760),
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	csp, err := cspwatch.Start(bctx)
	if err != nil {
		t.Fatal(err)
	}

	update := os.Getenv("GANTRY_UPDATE_SCREENSHOTS") == "1"
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 1000 {
			t.Fatalf("screenshot %s is not a PNG (%d bytes)", name, len(png))
		}
		dst := filepath.Join(t.TempDir(), name)
		if update {
			dst = filepath.Join("..", "..", "docs", "images", name)
		}
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s: %d bytes", dst, len(png))
	}
	text := func(path, sel string) string {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.Navigate(s.base+path)); err != nil {
			t.Fatalf("opening %s: %v", path, err)
		}
		txt, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s %s: %v", path, sel, err)
		}
		csp.Check(bctx, t, path)
		return txt
	}

	// The overview, as a user reads it.
	body := text("/status", "body")
	for _, want := range []string{"1 queued · 0 held · 1 executing · 1 workers", "1 recent failures", "w1", "active", s.running, s.queued, "Drain", "Pause", "Terminate", "Kill"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q:\n%s", want, body)
		}
	}
	shot("status-overview.png")

	// The failed operation's page.
	body = text("/status/operation?name="+url.QueryEscape(s.failed), "main")
	for _, want := range []string{"/bin/sh -c echo oops-out", "Exit code\t3", "execution started", "stdout", "download", "Invocation\t(none) › build-7 › test"} {
		if !strings.Contains(body, want) {
			t.Errorf("operation page lacks %q:\n%s", want, body)
		}
	}
	shot("status-operation.png")

	body = text("/status/failures", "#failures")
	if !strings.Contains(body, s.failed) || !strings.Contains(body, "w1") {
		t.Errorf("failures page:\n%s", body)
	}
	shot("status-failures.png")

	body = text("/status/fairness", "#invocations")
	if !strings.Contains(body, "(all)") {
		t.Errorf("invocations page:\n%s", body)
	}
	shot("status-invocations.png")

	// Every page, for what the browser reports: no CSP violation, no
	// exception.
	for _, path := range []string{"/status", "/status/invocations", "/status/build?id=test", "/status/fairness", "/status/failures", "/status/charts",
		"/status/operation?name=" + url.QueryEscape(s.failed), "/status/operation?name=" + url.QueryEscape(s.running), "/status/operation?name=" + url.QueryEscape(s.queued)} {
		text(path, "main")
	}

	// Drain the worker with its button.
	if err := chromedp.Do(bctx,
		chromedp.Navigate(s.base+"/status"),
		chromedp.Click(chromedp.CSS(`tr[data-worker="w1"] button[value="drain"]`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
	); err != nil {
		t.Fatalf("draining with the button: %v", err)
	}
	csp.Check(bctx, t, "the page after the drain button")
	flash, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`.flash`)))
	if err != nil {
		t.Fatal(err)
	}
	state, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`tr[data-worker="w1"] td:nth-child(2)`)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(state) != "draining" || !strings.Contains(flash, "w1: drain done") {
		t.Errorf("after the drain button: state %q, message %q", state, flash)
	}
	if !s.srv.Scheduler().WorkerControlOf("w1").Drain {
		t.Error("the drain button did not drain the worker")
	}
	shot("status-drained.png")
}
