package job

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/batch"
	"github.com/gantry-build/gantry/internal/testutil"
)

// BenchmarkBatchCached runs 64 job-list jobs, each with an input and an
// output, through Batch's steps against a real server, every one a cache
// hit: the client's work per job (spec, lookup, download of an unchanged
// output). The time per op is per job.
func BenchmarkBatchCached(b *testing.B) {
	const n = 64
	c := newClient(b)
	dir := b.TempDir()
	files := map[string]string{}
	var list strings.Builder
	list.WriteString("jobs:\n")
	for i := range n {
		files[fmt.Sprintf("in/%d.txt", i)] = fmt.Sprintf("input %d\n", i)
		fmt.Fprintf(&list, "  - name: j%d\n    command: [sh, -c, \"cat in/%d.txt > out/%d.txt\"]\n    inputs: [in/%d.txt]\n    outputs: [out/%d.txt]\n", i, i, i, i, i)
	}
	files["jobs.yaml"] = list.String()
	writeTree(b, dir, files)
	run := func() batch.Summary {
		jobs, err := batch.ParseFile(filepath.Join(dir, "jobs.yaml"))
		if err != nil {
			b.Fatal(err)
		}
		var log testutil.SyncBuffer
		return runJobs(b, c, jobs, NewLocalProcs(), &log)
	}
	if s := run(); s.Succeeded != n {
		b.Fatalf("first run %+v; want every job to succeed", s)
	}
	b.ResetTimer()
	for b.Loop() {
		if s := run(); s.CacheHits != n {
			b.Fatalf("summary %+v; want every job a cache hit", s)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/job")
}
