package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gantry-build/gantry/internal/testutil/cspwatch"
)

// TestLoginInChromium logs in with the form in headless Chromium as an
// operator would: opening /status without credentials lands on the
// form; a wrong token shows the error; the good one lands on /status
// with a session cookie the page's scripts cannot read; Log out ends
// it. GANTRY_UPDATE_SCREENSHOTS=1 writes the form's screenshot to
// docs/images/.
func TestLoginInChromium(t *testing.T) {
	browser := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f := startLoginFarm(t, 12*time.Hour)

	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browser),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(900, 500),
	)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	csp, err := cspwatch.Start(bctx)
	if err != nil {
		t.Fatal(err)
	}
	location := func() string {
		t.Helper()
		loc, err := chromedp.Run(bctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}

	// Without credentials the browser is sent to the form.
	if err := chromedp.Do(bctx, chromedp.Navigate(f.base+"/status/failures"), chromedp.WaitVisible(chromedp.CSS("#token"))); err != nil {
		t.Fatalf("opening /status/failures: %v", err)
	}
	if loc := location(); !strings.HasPrefix(loc, f.base+"/login?next=") {
		t.Fatalf("without credentials the browser is at %s, not the login form", loc)
	}
	csp.Check(bctx, t, "the login form")

	// A wrong token: the form again, with the reason.
	if err := chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.CSS("#token"), "wrong-token-0123456789"),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#login-error")),
	); err != nil {
		t.Fatalf("submitting a wrong token: %v", err)
	}
	msg, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#login-error")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "not known to this server") {
		t.Errorf("the error for a wrong token: %q", msg)
	}
	csp.Check(bctx, t, "the login form with its error")
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "status-login.png")
	if os.Getenv("GANTRY_UPDATE_SCREENSHOTS") == "1" {
		dst = filepath.Join("..", "..", "docs", "images", "status-login.png")
	}
	if err := os.WriteFile(dst, png, 0o644); err != nil {
		t.Fatal(err)
	}

	// The good token: the page asked for, as the token's identity.
	if err := chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.CSS("#token"), f.tokens["viewer"]),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#failures")),
	); err != nil {
		t.Fatalf("logging in with a good token: %v", err)
	}
	if loc := location(); loc != f.base+"/status/failures" {
		t.Errorf("after logging in the browser is at %s, want /status/failures", loc)
	}
	csp.Check(bctx, t, "/status/failures after logging in")
	cookies, err := chromedp.Run(bctx, chromedp.Evaluate[string]("document.cookie"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cookies, "gantry_session") {
		t.Errorf("the page's scripts can read the session cookie (not HttpOnly): %q", cookies)
	}

	// Log out: back at the form, and /status needs the form again.
	if err := chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS("#logout")),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.Navigate(f.base+"/status"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
	); err != nil {
		t.Fatalf("logging out: %v", err)
	}
	csp.Check(bctx, t, "the login form after logging out")
}
