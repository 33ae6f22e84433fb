package remote

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// compileSpec is a compile-like Spec: a source of its own under src/ and
// shared headers under sys/ and include/, each with its metadata, as the
// compiler launcher gives them. wd is the working directory.
func compileSpec(t *testing.T, root, src, wd string) Spec {
	t.Helper()
	spec := Spec{Args: []string{"cc", "-c", src}, LocalRoot: root, WorkingDir: wd, OutputFiles: []string{"out.o"}}
	for _, p := range []string{src, "sys/usr/include/stdio.h", "sys/usr/include/bits/types.h", "include/a.h", "sys/usr/include/stdlib.h"} {
		local := filepath.Join(root, p)
		fi, err := os.Stat(local)
		if err != nil {
			t.Fatal(err)
		}
		spec.Inputs = append(spec.Inputs, Input{Local: local, Path: p, Info: fi})
	}
	return spec
}

// prepareBoth prepares spec with the caching client c and with a client
// without the subtree cache, and checks that they make the same action
// with the same blobs.
func prepareBoth(t *testing.T, c *Client, spec Spec) *Action {
	t.Helper()
	a, err := c.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	want, err := offlineClient().Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != want.Digest() || a.Proto().InputRootDigest.Hash != want.Proto().InputRootDigest.Hash {
		t.Fatalf("%s: the action is %s (root %s) with the subtree cache, %s (root %s) without", spec.Inputs[0].Path,
			a.Digest(), a.Proto().InputRootDigest.Hash, want.Digest(), want.Proto().InputRootDigest.Hash)
	}
	keys := func(a *Action) []string {
		var ks []string
		for d := range maps.Keys(a.blobs) {
			ks = append(ks, d.String())
		}
		return slices.Sorted(slices.Values(ks))
	}
	if got, wantDs := keys(a), keys(want); !slices.Equal(got, wantDs) {
		t.Fatalf("%s: blobs %v with the subtree cache, %v without", spec.Inputs[0].Path, got, wantDs)
	}
	for d, src := range a.blobs {
		if w := want.blobs[d]; src.path != w.path || (src.path == "" && string(src.data) != string(w.data)) {
			t.Fatalf("%s: blob %s comes from %+v with the subtree cache, %+v without", spec.Inputs[0].Path, d, src, w)
		}
	}
	if a.Stats().Files != want.Stats().Files || a.Stats().InputBytes != want.Stats().InputBytes {
		t.Errorf("%s: stats %+v with the subtree cache, %+v without", spec.Inputs[0].Path, a.Stats(), want.Stats())
	}
	return a
}

// TestPrepareSubtreeCache: the compiles of a batch share the subtrees of
// their headers: from the third compile with the same headers on, Prepare
// takes those subtrees from the cache (the same node), and the actions
// and their blobs are exactly those a Prepare without the cache makes; a
// header changed in between, or a working directory in a shared
// directory, is not taken from the cache.
func TestPrepareSubtreeCache(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"sys/usr/include/stdio.h": "#include <bits/types.h>\n", "sys/usr/include/bits/types.h": "typedef int t;\n",
		"sys/usr/include/stdlib.h": "", "include/a.h": "int a;\n",
	}
	for i := range 4 {
		files[filepath.Join("src", string(rune('a'+i))+".c")] = "#include <stdio.h>\n" + string(rune('a'+i))
	}
	writeFiles(t, root, files)
	c := offlineClient()
	c.subtrees = newSubtreeCache()

	prepareBoth(t, c, compileSpec(t, root, "src/a.c", ""))
	if len(c.subtrees.m) != 0 {
		t.Fatalf("after one compile %d subtrees are cached; want none (a subtree seen once is not kept)", len(c.subtrees.m))
	}
	prepareBoth(t, c, compileSpec(t, root, "src/b.c", ""))
	if len(c.subtrees.m) != 2 {
		t.Fatalf("after two compiles %d subtrees are cached; want 2 (sys and include)", len(c.subtrees.m))
	}
	grafted := func(spec Spec) int {
		t.Helper()
		cached := map[*dirNode]bool{}
		for _, st := range c.subtrees.m {
			cached[st.node] = true
		}
		b := &treeBuilder{c: c, a: &Action{blobs: map[digest.Digest]source{}}, root: &dirNode{}, keepLeft: keptBytesPerAction}
		if _, err := b.addInputs(spec.Inputs, spec.WorkingDir); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, d := range b.root.dirs {
			if cached[d.node] {
				n++
			}
		}
		return n
	}
	spec := compileSpec(t, root, "src/c.c", "")
	if n := grafted(spec); n != 2 {
		t.Errorf("a third compile with the same headers took %d subtrees from the cache; want 2", n)
	}
	prepareBoth(t, c, spec)

	// A changed header is a new version: its subtree is built again.
	writeFiles(t, root, map[string]string{"sys/usr/include/bits/types.h": "typedef long t;\n"})
	spec = compileSpec(t, root, "src/d.c", "")
	if n := grafted(spec); n != 1 {
		t.Errorf("after a header changed, a compile took %d subtrees from the cache; want 1 (include/)", n)
	}
	prepareBoth(t, c, spec)

	// A working directory under a shared directory: Prepare makes it in
	// the tree, so that subtree is the action's own.
	spec = compileSpec(t, root, "src/a.c", "include")
	if n := grafted(spec); n != 1 {
		t.Errorf("with the working directory in include/, a compile took %d subtrees from the cache; want 1 (sys/)", n)
	}
	for range 3 {
		prepareBoth(t, c, spec)
	}
}
