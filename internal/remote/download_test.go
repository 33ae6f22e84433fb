package remote

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestDownloadLargeFilesSymlinksAndModes: a large output (streamed, more
// than a batch), executable files inside an output directory, symbolic
// links (as outputs and inside a directory) and large stdout all arrive
// as the action made them; a second run rewrites nothing.
func TestDownloadLargeFilesSymlinksAndModes(t *testing.T) {
	c, _ := newClient(t)
	root := t.TempDir()
	spec := Spec{
		Args: sh(`set -e
head -c 3000000 /dev/zero | tr '\0' 'z' > big.bin
mkdir -p tools && printf '#!/bin/sh\necho tool\n' > tools/run.sh && chmod 755 tools/run.sh
echo data > tools/data.txt && ln -s data.txt tools/link.txt
ln -s big.bin big.link
head -c 2000000 /dev/zero | tr '\0' 'o'`),
		Env:         []string{"PATH=/usr/bin:/bin"},
		LocalRoot:   root,
		OutputFiles: []string{"big.bin", "big.link"},
		OutputDirs:  []string{"tools"},
	}
	code, stdout, _, info := runSpec(t, c, spec)
	if code != 0 || len(stdout) != 2000000 || strings.Trim(stdout, "o") != "" {
		t.Fatalf("code %d, %d bytes of stdout", code, len(stdout))
	}
	big := readFile(t, filepath.Join(root, "big.bin"))
	if len(big) != 3000000 || strings.Trim(big, "z") != "" {
		t.Errorf("big.bin has %d bytes", len(big))
	}
	if fi, err := os.Stat(filepath.Join(root, "tools/run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("tools/run.sh: %v %v, want mode 0755", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(root, "tools/data.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("tools/data.txt: %v %v, want mode 0644", fi.Mode(), err)
	}
	for link, target := range map[string]string{"big.link": "big.bin", "tools/link.txt": "data.txt"} {
		if got, err := os.Readlink(filepath.Join(root, link)); err != nil || got != target {
			t.Errorf("%s -> %q (%v), want -> %q", link, got, err, target)
		}
	}
	if info.Download.DownloadedBytes < 5000000 {
		t.Errorf("downloaded %d bytes, want the 5 MB of big.bin and stdout counted", info.Download.DownloadedBytes)
	}
	leftovers, _ := filepath.Glob(filepath.Join(root, "*", ".gantry-out-*"))
	more, _ := filepath.Glob(filepath.Join(root, ".gantry-out-*"))
	if len(leftovers)+len(more) > 0 {
		t.Errorf("temporary files left: %v %v", leftovers, more)
	}

	_, _, _, info = runSpec(t, c, spec)
	if !info.Lookup.Hit || info.Download.Written != 0 || info.Download.Unchanged != 3 {
		t.Errorf("second run: %+v", info)
	}
}

// TestExecuteInlinesOutputs: an executed action's small output file
// comes inside Execute's result (Gantry's client asks with a header), so
// Download writes it without a call to the CAS.
func TestExecuteInlinesOutputs(t *testing.T) {
	c, _ := newClient(t)
	root := t.TempDir()
	spec := Spec{
		Args:        sh(`echo compiled > a.o`),
		Env:         []string{"PATH=/usr/bin:/bin"},
		LocalRoot:   root,
		OutputFiles: []string{"a.o"},
	}
	code, _, _, info := runSpec(t, c, spec)
	if code != 0 || info.Lookup.Hit || info.Exec.OperationName == "" {
		t.Fatalf("code %d, %+v: want an executed action", code, info)
	}
	if info.Download.Written != 1 || info.Download.Inlined != 1 {
		t.Errorf("download %+v: want a.o written from the inlined result", info.Download)
	}
	if got := readFile(t, filepath.Join(root, "a.o")); got != "compiled\n" {
		t.Errorf("a.o = %q", got)
	}
}

// TestCacheHitInlinesMissingOutputs: a cache hit whose small output file
// is missing locally gets it inside the ActionResult (no second call),
// and a file that is present is not sent again.
func TestCacheHitInlinesMissingOutputs(t *testing.T) {
	c, _ := newClient(t)
	root := t.TempDir()
	spec := Spec{
		Args:        sh(`echo one > a.o; echo two > b.o`),
		Env:         []string{"PATH=/usr/bin:/bin"},
		LocalRoot:   root,
		OutputFiles: []string{"a.o", "b.o"},
	}
	if code, _, _, info := runSpec(t, c, spec); code != 0 || info.Lookup.Hit {
		t.Fatalf("first run: code %d, %+v", code, info)
	}
	if err := os.Remove(filepath.Join(root, "a.o")); err != nil {
		t.Fatal(err)
	}
	_, _, _, info := runSpec(t, c, spec)
	if !info.Lookup.Hit || info.Download.Written != 1 || info.Download.Inlined != 1 || info.Download.Unchanged != 1 {
		t.Errorf("cache hit with a.o removed: %+v, want a.o written from the inlined result and b.o unchanged", info.Download)
	}
	if got := readFile(t, filepath.Join(root, "a.o")); got != "one\n" {
		t.Errorf("a.o = %q", got)
	}
}

// TestConcurrentRuns: many jobs share one Client (as gantry batch does):
// each gets its own result, and a header they all read is hashed once.
func TestConcurrentRuns(t *testing.T) {
	c, _ := newClient(t)
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"common.h": strings.Repeat("h", 4096)})
	const jobs = 12
	for i := range jobs {
		writeFiles(t, root, map[string]string{fmt.Sprintf("src%d.c", i): fmt.Sprint("source ", i)})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var hashed int64
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := fmt.Sprintf("src%d.c", i)
			spec := Spec{
				Args:        sh("cat " + src + " > out" + fmt.Sprint(i) + ".o; wc -c < common.h"),
				LocalRoot:   root,
				Inputs:      []Input{{Local: filepath.Join(root, src), Path: src}, {Local: filepath.Join(root, "common.h"), Path: "common.h"}},
				OutputFiles: []string{"out" + fmt.Sprint(i) + ".o"},
			}
			var stdout, stderr strings.Builder
			code, info, err := c.Run(testCtx(t), spec, &stdout, &stderr, nil)
			if err != nil || code != 0 || strings.TrimSpace(stdout.String()) != "4096" {
				t.Errorf("job %d: code %d, stdout %q, err %v", i, code, stdout.String(), err)
			}
			mu.Lock()
			hashed += info.Prepare.HashedBytes
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i := range jobs {
		if got := readFile(t, filepath.Join(root, fmt.Sprintf("out%d.o", i))); got != fmt.Sprint("source ", i) {
			t.Errorf("out%d.o = %q", i, got)
		}
	}
	// Each source once and the header at most a few times (jobs that
	// raced to it before the first stored its digest), not 12 times.
	if sources := int64(jobs * len("source 1")); hashed > sources+2+4*4096 {
		t.Errorf("hashed %d bytes for %d jobs; the shared header was hashed by most of them", hashed, jobs)
	}
}
