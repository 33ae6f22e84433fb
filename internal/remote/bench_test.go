package remote

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/digest"
)

// BenchmarkPrepareWarm is the client's CPU for one compile-like action
// whose 100 inputs (a source and 99 headers of 4 KiB in 10 directories)
// are in the file digest cache, as in a batch after the first jobs.
func BenchmarkPrepareWarm(b *testing.B) {
	c := offlineClient()
	root := b.TempDir()
	files := map[string]string{"src/main.c": "int main(){}"}
	for i := range 99 {
		files[fmt.Sprintf("include/d%d/h%d.h", i%10, i)] = strings.Repeat("x", 4096)
	}
	for p, content := range files {
		writeFilesB(b, root, p, content)
	}
	spec := Spec{Args: []string{"gcc", "-c", "main.c", "-o", "main.o"}, Env: []string{"PATH=/usr/bin:/bin"}, LocalRoot: root, WorkingDir: "src", OutputFiles: []string{"main.o"}}
	for p := range files {
		spec.Inputs = append(spec.Inputs, Input{Local: filepath.Join(root, p), Path: p})
	}
	if _, err := c.Prepare(spec); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Prepare(spec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunCached is one cached action end to end against an
// in-process server (Prepare, an ActionCache hit, an up-to-date output
// checked): the client's and the server's time together.
func BenchmarkRunCached(b *testing.B) {
	c, _ := newClient(b)
	root := b.TempDir()
	spec := Spec{Args: sh("cat src/*.c > out.o"), LocalRoot: root, OutputFiles: []string{"out.o"}}
	for i := range 20 {
		p := fmt.Sprintf("src/f%d.c", i)
		writeFilesB(b, root, p, strings.Repeat("c", 2048))
		spec.Inputs = append(spec.Inputs, Input{Local: filepath.Join(root, p), Path: p})
	}
	var out strings.Builder
	if _, _, err := c.Run(b.Context(), spec, &out, &out, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_, info, err := c.Run(b.Context(), spec, &out, &out, nil)
		if err != nil || !info.Lookup.Hit {
			b.Fatalf("not a cache hit: %v %+v", err, info)
		}
	}
}

// BenchmarkDownloadWrite is the client's CPU to write one compile's
// inlined object file (obj/main.o below the working directory) from its
// ActionResult, as a cold job of gantry batch does: every iteration
// writes new content, so nothing is up to date.
func BenchmarkDownloadWrite(b *testing.B) {
	c := offlineClient()
	root := b.TempDir()
	writeFilesB(b, root, "src/obj/.keep", "")
	a, err := c.Prepare(Spec{Args: []string{"cc"}, LocalRoot: root, WorkingDir: "src", OutputFiles: []string{"obj/main.o"}})
	if err != nil {
		b.Fatal(err)
	}
	var results [2]*repb.ActionResult
	for i := range results {
		data := []byte(strings.Repeat(fmt.Sprint(i), 8192))
		results[i] = &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "obj/main.o", Digest: digest.Compute(c.fn, data).Proto(), Contents: data}}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		if _, stats, err := c.Download(b.Context(), a, results[i%2]); err != nil || stats.Written != 1 {
			b.Fatalf("%+v %v", stats, err)
		}
	}
}

// BenchmarkDownloadUpToDate is BenchmarkDownloadWrite's cached case: the
// object file is already there, so it is only checked.
func BenchmarkDownloadUpToDate(b *testing.B) {
	c := offlineClient()
	root := b.TempDir()
	writeFilesB(b, root, "src/obj/.keep", "")
	a, err := c.Prepare(Spec{Args: []string{"cc"}, LocalRoot: root, WorkingDir: "src", OutputFiles: []string{"obj/main.o"}})
	if err != nil {
		b.Fatal(err)
	}
	data := []byte(strings.Repeat("o", 8192))
	res := &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "obj/main.o", Digest: digest.Compute(c.fn, data).Proto(), Contents: data}}}
	if _, _, err := c.Download(b.Context(), a, res); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, stats, err := c.Download(b.Context(), a, res); err != nil || stats.Unchanged != 1 {
			b.Fatalf("%+v %v", stats, err)
		}
	}
}
