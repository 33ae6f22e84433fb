package remote

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// keptFiles counts the input files of a whose bytes are held in memory.
func keptFiles(a *Action) int {
	n := 0
	for _, src := range a.blobs {
		if src.path != "" && src.data != nil {
			n++
		}
	}
	return n
}

// TestUploadSendsTheBytesHashed: a small input new to the Client is
// uploaded from the bytes Prepare hashed, without reading the file again
// (it is gone by then), and Upload lets go of them; a large input is not
// kept but streamed from its file.
func TestUploadSendsTheBytesHashed(t *testing.T) {
	c, _ := newClient(t)
	root := t.TempDir()
	big := strings.Repeat("b", 2<<20) // over SmallBlobLimit
	writeFiles(t, root, map[string]string{"src.c": "int f(void) { return 1; }\n", "big.bin": big})
	spec := Spec{Args: sh("cat src.c"), LocalRoot: root, Inputs: []Input{
		{Local: filepath.Join(root, "src.c"), Path: "src.c"},
		{Local: filepath.Join(root, "big.bin"), Path: "big.bin"},
	}}
	a, err := c.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	if n := keptFiles(a); n != 1 || a.kept != 1 {
		t.Fatalf("Prepare kept %d files (counted %d), want only src.c", n, a.kept)
	}
	if err := os.Remove(filepath.Join(root, "src.c")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(testCtx(t), a); err != nil {
		t.Fatalf("the upload read the source again: %v", err)
	}
	if n := keptFiles(a); n != 0 || a.kept != 0 {
		t.Errorf("Upload left %d kept files (counted %d)", n, a.kept)
	}
	src := digest.Compute(c.fn, []byte("int f(void) { return 1; }\n"))
	got, err := c.cas.GetMany(testCtx(t), []digest.Digest{src})
	if err != nil {
		t.Fatal(err)
	}
	if string(got[src]) != "int f(void) { return 1; }\n" {
		t.Errorf("the CAS holds %q for the source", got[src])
	}
	res, _, err := c.Execute(testCtx(t), a, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := c.Download(testCtx(t), a, res)
	if err != nil || string(out.Stdout) != "int f(void) { return 1; }\n" {
		t.Errorf("the action saw %q (%v)", out.Stdout, err)
	}
}

// TestKeptBytesOnlyForUploads: a file whose content the CAS is known to
// hold is not kept, and a cache hit drops what was kept.
func TestKeptBytesOnlyForUploads(t *testing.T) {
	c, _ := newClient(t)
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"a.txt": "same\n", "b.txt": "same\n"})
	spec := func(name string) Spec {
		return Spec{Args: sh("cat " + name), LocalRoot: root, Inputs: []Input{{Local: filepath.Join(root, name), Path: name}}}
	}
	var stdout bytes.Buffer
	if _, _, err := c.Run(testCtx(t), spec("a.txt"), &stdout, &stdout, nil); err != nil || stdout.String() != "same\n" {
		t.Fatalf("first run: %v %q", err, stdout.String())
	}
	// b.txt is hashed (a new path) but its content is in the CAS already.
	b, err := c.Prepare(spec("b.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if b.Stats().HashedBytes != 5 || keptFiles(b) != 0 {
		t.Errorf("hashed %d bytes, kept %d files; want 5 and none", b.Stats().HashedBytes, keptFiles(b))
	}

	// A fresh Client hashes a.txt again and keeps it; the cache hit drops it.
	c2, err := New(testCtx(t), c.Conn(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := c2.Prepare(spec("a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if keptFiles(a2) != 1 {
		t.Fatalf("a fresh Client kept %d files, want 1", keptFiles(a2))
	}
	if _, st, err := c2.Lookup(testCtx(t), a2); err != nil || !st.Hit {
		t.Fatalf("lookup: %v %+v", err, st)
	}
	if keptFiles(a2) != 0 || a2.kept != 0 {
		t.Errorf("a cache hit left %d kept files", keptFiles(a2))
	}
}
