package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// TestBazelMinimalDownloadsSurviveEviction drives Bazel 4.2.3 with
// --remote_download_minimal against a disk CAS of 4 MiB: a build (a
// chain of actions with 300 KB outputs, none downloaded), then blobs
// nobody asks about, used more recently than the build's outputs and
// more than the CAS holds, then an incremental rebuild that runs on the
// first build's outputs. It succeeds without "Lost inputs": the blobs
// Bazel was told of are kept for storage.cas.min_lifetime while the
// others go (with plain LRU, the outputs would go). With a CAS too small
// for the build's own outputs, the build fails with an error naming
// storage.cas.min_lifetime.
func TestBazelMinimalDownloadsSurviveEviction(t *testing.T) {
	c := bazelClients(t)[0] // Bazel 4.2.3: --remote_download_minimal
	requireBazel(t, c)
	start := func(maxSize string) *gantryProc {
		cfg := filepath.Join(testDir(t, "lifetime-cfg"), "gantry.yaml")
		if err := os.WriteFile(cfg, []byte("storage:\n  cas:\n    max_size: "+maxSize+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return startGantry(t, "--config", cfg)
	}
	workspace := func() *bazelWorkspace {
		w := newBazelWorkspace(t, c)
		w.Dir = filepath.Join(filepath.Dir(w.Dir), "lifetime")
		return w
	}
	flags := func(g *gantryProc) []string {
		return []string{"//:sizes",
			"--remote_executor=" + g.GRPCURL(),
			"--remote_download_minimal",
			"--spawn_strategy=remote",
			"--genrule_strategy=remote",
			"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
		}
	}
	const evictions = "gantry_cas_evictions_total"
	const refusals = "gantry_cas_lifetime_refusals_total"

	t.Run("kept", func(t *testing.T) {
		g := start("4MiB")
		ctx := context.Background()
		cas := casClient(t, g.GRPCAddr)
		var junk []digest.Digest
		putJunk := func(n int) {
			t.Helper()
			for range n { // 256 KiB each, that nobody asks about
				b := []byte(strings.Repeat(fmt.Sprintf("junk %3d ", len(junk)), 256<<10/9))
				d := digest.Compute(digest.SHA256, b)
				if err := blobstore.Put(ctx, cas, d, b); err != nil {
					t.Fatal(err)
				}
				junk = append(junk, d)
			}
		}
		putJunk(8)
		w := workspace()
		w.mustRun("build", flags(g)...)
		// Read the junk back: it is now used more recently than the
		// build's outputs, which Bazel holds only as digests. Then more
		// junk: the CAS must evict, and plain LRU would take the outputs.
		for _, d := range junk {
			if _, err := blobstore.Get(ctx, cas, d); err != nil {
				t.Fatal(err)
			}
		}
		putJunk(6)
		if g.counter(t, evictions) == 0 {
			t.Fatal("no eviction: the test does not exercise the lifetime")
		}
		// An incremental rebuild: only :sizes runs again, on the outputs
		// of the first build.
		if err := os.WriteFile(filepath.Join(w.Dir, "extra.txt"), []byte("extra 2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		res := w.mustRun("build", flags(g)...)
		if s := summaryOf(t, res); s.Count(kindRemote) != 1 {
			t.Errorf("the rebuild ran %d actions remotely, want 1 (:sizes): %s", s.Count(kindRemote), s.Line)
		}
		if strings.Contains(res.Output, "Lost inputs") {
			t.Errorf("the rebuild lost inputs:\n%s", res.Output)
		}
		if n := g.counter(t, refusals); n != 0 {
			t.Errorf("%s = %v; the CAS had room", refusals, n)
		}
	})

	t.Run("impossible", func(t *testing.T) {
		g := start("700KiB") // the chain's outputs alone are 1.2 MB
		w := workspace()
		res := w.run("build", flags(g)...)
		if res.ExitCode == 0 {
			t.Fatalf("the build succeeded in a CAS smaller than its outputs; output:\n%s", res.Output)
		}
		if !strings.Contains(res.Output, "storage.cas.min_lifetime") {
			t.Errorf("the failed build does not name storage.cas.min_lifetime; output:\n%s", res.Output)
		}
		if g.counter(t, refusals) == 0 {
			t.Errorf("%s = 0 after the build was refused room", refusals)
		}
	})
}
