package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/testutil/cspwatch"
)

// TestStatusPagesAfterBazelBuild reads the status pages in headless
// Chromium after a real Bazel build, as a user asking "what did my build
// do" would: the build's page counts its actions and labels them, the
// failing action's page shows its stderr inline, a queued action with a
// property no worker has says why it waits, and the charts render.
// GANTRY_UPDATE_SCREENSHOTS=1 writes the screenshots to docs/images/.
func TestStatusPagesAfterBazelBuild(t *testing.T) {
	browser := chromium(t)
	c := bazelClients(t)[0] // Bazel 4.2.3: one client is enough for the pages
	requireBazel(t, c)
	g := startGantry(t)
	w := newBazelWorkspace(t, c)
	const invocation = "3f1b2c4d-0000-4000-8000-00000000e2e1"
	flags := []string{"--remote_executor=" + g.GRPCURL(), "--spawn_strategy=remote", "--genrule_strategy=remote",
		"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs), "--invocation_id=" + invocation}
	w.mustRun("build", append([]string{"//:greeting"}, flags...)...)
	failing := "3f1b2c4d-0000-4000-8000-00000000e2e2"
	res := w.run("build", append([]string{"//:expected_failure"}, append(flags[:len(flags)-1:len(flags)-1], "--invocation_id="+failing)...)...)
	if res.ExitCode != 1 {
		t.Fatalf("//:expected_failure: exit code %d, want 1:\n%s", res.ExitCode, res.Output)
	}

	// An action no worker can run (64 cores on a 2-core worker) stays
	// queued.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := client.Dial(g.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	put := func(m proto.Message) *repb.Digest {
		b, _ := proto.Marshal(m)
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, cas, d, b); err != nil {
			t.Fatal(err)
		}
		return d.Proto()
	}
	cmd := &repb.Command{Arguments: []string{"/bin/true"}, Platform: &repb.Platform{Properties: []*repb.Platform_Property{{Name: "min-cores", Value: "64"}}}}
	action := put(&repb.Action{CommandDigest: put(cmd), InputRootDigest: put(&repb.Directory{}), Platform: cmd.Platform})
	named := make(chan string, 1)
	qctx, qcancel := context.WithCancel(ctx)
	defer qcancel()
	go client.ExecuteNamed(qctx, conn, &repb.ExecuteRequest{ActionDigest: action}, func(n string) { named <- n })
	var queued string
	select {
	case queued = <-named:
	case <-ctx.Done():
		t.Fatal("the unsatisfiable action got no operation name")
	}

	bctx, stop := browserContext(t, ctx, browser)
	defer stop()
	// Every page the test opens must keep to its CSP and throw nothing.
	csp, err := cspwatch.Start(bctx)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + g.HTTPAddr
	update := os.Getenv("GANTRY_UPDATE_SCREENSHOTS") == "1"
	page := func(path, sel, shot string) string {
		t.Helper()
		tctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(tctx, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		text, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("main")))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		csp.Check(bctx, t, path)
		if update && shot != "" {
			png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(repoRoot(t), "docs", "images", shot), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return text
	}
	waitText := func(path, sel, want string) string {
		t.Helper()
		var text string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if text = page(path, sel, ""); strings.Contains(text, want) {
				return text
			}
		}
		t.Fatalf("%s never showed %q:\n%s", path, want, text)
		return ""
	}

	// The builds list and the build's page (the history is written in the
	// background: wait for it).
	builds := waitText("/status/invocations", "#builds", failing)
	if !strings.Contains(builds, invocation) || !strings.Contains(builds, "bazel") {
		t.Errorf("the builds page lacks the builds or the tool:\n%s", builds)
	}
	page("/status/invocations", "#builds", "status-builds.png")
	build := page("/status/build?id="+invocation, "#build-operations", "status-build.png")
	if !strings.Contains(build, "Executed") || strings.Contains(build, "none kept") || !strings.Contains(build, "greeting") {
		t.Errorf("the build's page lacks its operations (labelled with the target or its output):\n%s", build)
	}
	// Bazel uploaded the inputs and downloaded the outputs, with its
	// invocation id on each call.
	if !strings.Contains(build, "Uploaded\t") || strings.Contains(build, "Uploaded\t0 B") || strings.Contains(build, "Downloaded\t0 B") {
		t.Errorf("the build's page does not count its bytes up and down:\n%s", build)
	}
	fail := page("/status/build?id="+failing, "#build-operations", "")
	if !strings.Contains(fail, "exit 1") {
		t.Errorf("the failing build's page lacks the failed action:\n%s", fail)
	}
	// Its operation's page: the stderr inline.
	href, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`#build-operations a`), "href"))
	if err != nil || !href.Exists {
		t.Fatalf("the failing build's operation link: %v", err)
	}
	op := page(href.Value, "#result", "status-operation-failed.png")
	if !strings.Contains(op, expectedFailureMarker) {
		t.Errorf("the failed operation's page lacks its stderr inline:\n%s", op)
	}

	// The queued action says why.
	why := page("/status/operation?name="+queued, "#why-queued", "status-why-queued.png")
	for _, want := range []string{"Why is it still queued?", "No registered worker can run this action", "min-cores"} {
		if !strings.Contains(why, want) {
			t.Errorf("the queued operation's page lacks %q:\n%s", want, why)
		}
	}

	// The charts render: every image loaded with its size.
	page("/status/charts", "img", "status-charts.png")
	loaded, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`Array.from(document.images).length == 10 && Array.from(document.images).every(i => i.complete && i.naturalWidth == 640)`))
	if err != nil {
		t.Fatal(err)
	}
	if !loaded {
		t.Error("the charts page's images did not all load as 640-pixel SVGs")
	}
}

// chromium finds headless Chromium; under CI=true its absence fails the
// test, elsewhere it skips.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if inCI() {
		t.Fatal("chromium is not installed; scripts/install-test-deps.sh installs it (Debian package chromium)")
	}
	t.Skip("chromium is not installed (Debian package chromium)")
	return ""
}

// browserContext starts headless Chromium for the test.
func browserContext(t *testing.T, ctx context.Context, browser string) (context.Context, func()) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 800),
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	// Start the browser on bctx itself: the first run's context owns it,
	// and later runs use contexts with timeouts derived from bctx.
	if err := chromedp.Do(bctx); err != nil {
		bcancel()
		acancel()
		t.Fatalf("starting %s: %v", browser, err)
	}
	return bctx, func() { bcancel(); acancel() }
}
