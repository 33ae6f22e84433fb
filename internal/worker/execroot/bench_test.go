package execroot

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker/dircache"
	"github.com/gantry-build/gantry/internal/worker/filecache"
)

// BenchmarkLinkInputDirectories measures what an action with an input
// tree of 10,000 files (big/ with 100 directories of 100 files, next to
// an output) costs to lay out and clean up, file by file (before) and
// with big/ linked from the tree cache (after), with cold caches (empty
// file and tree caches, a fresh exec root directory) and warm ones (every
// blob and the tree cached, a recycled exec root, as a worker runs
// consecutive actions), and with a new tree whose files are cached
// (newtree: built into the tree cache, against laid out in the recycled
// exec root). Each iteration runs both modes, alternating which
// goes first, so that the machine's load hits both alike; the medians are
// reported in ms.
//
//	go test -run '^$' -bench BenchmarkLinkInputDirectories -benchtime 15x ./internal/worker/execroot
func BenchmarkLinkInputDirectories(b *testing.B) {
	cas := blobstore.NewMemory(0)
	tb := treeBuilder{b, cas}
	root, err := digest.FromProto(fn, tb.dir(&repb.Directory{
		Files:       []*repb.FileNode{fnode("BUILD", tb.file("build"), false)},
		Directories: []*repb.DirectoryNode{dnode("big", tb.bigDir("bench", 100, 100))},
	}))
	if err != nil {
		b.Fatal(err)
	}
	cmd := &repb.Command{Arguments: []string{"true"}, OutputFiles: []string{"out/result"}}
	base := b.TempDir()
	ctx := context.Background()
	seq := 0
	fresh := func(what string) string {
		seq++
		return filepath.Join(base, what+strconv.Itoa(seq))
	}
	// once builds and recycles one exec root, returning the time taken.
	once := func(files *filecache.Cache, link Linking, dir string) time.Duration {
		start := time.Now()
		r, err := Build(ctx, files, cas, fn, root, dir, cmd, link)
		if err != nil {
			b.Fatal(err)
		}
		if want := 10001; r.Files != want {
			b.Fatalf("%d files, want %d", r.Files, want)
		}
		if _, err := r.Recycle(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	newCaches := func() (*filecache.Cache, *dircache.Cache) {
		files, err := filecache.New(fresh("cache"), 0, cas)
		if err != nil {
			b.Fatal(err)
		}
		trees, err := dircache.New(fresh("trees"), files)
		if err != nil {
			b.Fatal(err)
		}
		return files, trees
	}
	report := func(b *testing.B, before, after []time.Duration) {
		med := func(ds []time.Duration) float64 {
			slices.Sort(ds)
			return float64(ds[len(ds)/2].Microseconds()) / 1000
		}
		b.ReportMetric(med(before), "filebyfile-median-ms")
		b.ReportMetric(med(after), "linked-median-ms")
		b.ReportMetric(0, "ns/op")
	}

	b.Run("cold", func(b *testing.B) {
		var before, after []time.Duration
		for i := 0; i < b.N; i++ {
			for k := range 2 {
				files, trees := newCaches()
				if (i+k)%2 == 0 {
					before = append(before, once(files, Linking{}, fresh("root")))
				} else {
					after = append(after, once(files, Linking{Trees: trees}, fresh("root")))
				}
				b.StopTimer()
				clearDir(base)
				b.StartTimer()
			}
		}
		report(b, before, after)
	})

	b.Run("warm", func(b *testing.B) {
		files, trees := newCaches()
		dirBefore, dirAfter := fresh("root"), fresh("root")
		once(files, Linking{}, dirBefore) // fills the file cache, leaves a skeleton
		once(files, Linking{Trees: trees}, dirAfter)
		var before, after []time.Duration
		for i := 0; i < b.N; i++ {
			for k := range 2 {
				if (i+k)%2 == 0 {
					before = append(before, once(files, Linking{}, dirBefore))
				} else {
					after = append(after, once(files, Linking{Trees: trees}, dirAfter))
				}
			}
		}
		if s := trees.Stats(); s.Builds != 1 {
			b.Fatalf("tree cache %+v: warm runs built the tree again", s)
		}
		report(b, before, after)
	})

	// A new tree whose files are all cached (another version of the
	// tree elsewhere, or its first sandboxed use): building it into the
	// tree cache and binding it, against laying it out in the recycled
	// exec root, whose directories are reused.
	b.Run("newtree", func(b *testing.B) {
		files, _ := newCaches()
		dirBefore, dirAfter := fresh("root"), fresh("root")
		once(files, Linking{}, dirBefore)
		once(files, Linking{}, dirAfter)
		var before, after []time.Duration
		for i := 0; i < b.N; i++ {
			for k := range 2 {
				if (i+k)%2 == 0 {
					before = append(before, once(files, Linking{}, dirBefore))
					continue
				}
				b.StopTimer()
				trees, err := dircache.New(fresh("trees"), files)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				after = append(after, once(files, Linking{Trees: trees}, dirAfter))
			}
		}
		report(b, before, after)
	})
}

// clearDir empties dir, read-only trees included.
func clearDir(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(q, 0o755)
			}
			return nil
		})
		os.RemoveAll(p)
	}
}
