package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkStart measures what the sandbox adds to starting an action:
// /bin/true run directly, through the sandbox's wrapper (Prepare and
// Finish included), and through the wrapper with one read-only bind of an
// input directory (directory linking), reported as the median in ms.
//
//	go test -run '^$' -bench BenchmarkStart -benchtime 50x ./internal/worker/sandbox
func BenchmarkStart(b *testing.B) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skip("bwrap not installed")
	}
	base := b.TempDir()
	root := filepath.Join(base, "roots", "1")
	os.MkdirAll(root, 0o755)
	s, err := New(Config{WorkDir: base, UID: 61730, GID: 65534, Limits: Limits{PidsLimit: 4096}})
	if err != nil {
		b.Fatal(err)
	}
	tree := filepath.Join(base, "trees", "t")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.MkdirAll(filepath.Join(root, "big"), 0o755)
	bind := []Bind{{Src: tree, Dst: filepath.Join(root, "big")}}
	run := func(b *testing.B, sandboxed bool, ro []Bind) {
		times := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			argv := []string{"/bin/true"}
			if ro != nil {
				argv = []string{"/bin/test", "-d", "big/sub"}
			}
			var a *Action
			if sandboxed {
				if a, err = s.Prepare(root, "", Policy{PidsLimit: 4096}, ro); err != nil {
					b.Fatal(err)
				}
				argv = append(append([]string{}, a.Wrapper...), argv...)
			}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = root
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			if a != nil {
				a.Finish()
			}
			times = append(times, time.Since(start))
		}
		slices.Sort(times)
		b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
	}
	b.Run("plain", func(b *testing.B) { run(b, false, nil) })
	b.Run("bwrap", func(b *testing.B) { run(b, true, nil) })
	b.Run("bwrap-ro-bind", func(b *testing.B) { run(b, true, bind) })
}
