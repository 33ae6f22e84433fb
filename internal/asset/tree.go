package asset

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
)

// ArchiveError is an archive Gantry refuses to unpack, and why.
type ArchiveError struct {
	// Entry is the offending entry's name as the archive spells it ("":
	// the archive as a whole).
	Entry string
	Msg   string
}

func (e *ArchiveError) Error() string {
	if e.Entry == "" {
		return "archive refused: " + e.Msg
	}
	return fmt.Sprintf("archive refused: entry %s %s", quoteEntry(e.Entry), e.Msg)
}

// quoteEntry quotes an entry's name; of a long one, only its start and
// end.
func quoteEntry(name string) string {
	if len(name) <= 200 {
		return strconv.Quote(name)
	}
	return fmt.Sprintf("%q...%q (%d bytes)", name[:80], name[len(name)-80:], len(name))
}

// tree is an archive's contents being assembled into REAPI Directory
// messages. Files are in the CAS already; the tree holds their digests.
type tree struct {
	root *dirNode
}

type dirNode struct {
	dirs  map[string]*dirNode
	files map[string]*repb.FileNode
	links map[string]string
}

func newDirNode() *dirNode {
	return &dirNode{dirs: map[string]*dirNode{}, files: map[string]*repb.FileNode{}, links: map[string]string{}}
}

func newTree() *tree { return &tree{root: newDirNode()} }

// cleanEntryPath turns an entry's name into a relative slash path
// without "." segments; "" is the root. Absolute names, ".." segments,
// backslashes, NUL bytes and segments longer than a file name may be
// (inputtree.MaxNameLength) are refused.
func cleanEntryPath(name string) (string, error) {
	switch {
	case strings.HasPrefix(name, "/"):
		return "", &ArchiveError{name, "is an absolute path; archives must hold relative paths"}
	case strings.ContainsAny(name, "\\\x00"):
		return "", &ArchiveError{name, "has a backslash or NUL byte in its name"}
	}
	var segs []string
	for _, s := range strings.Split(name, "/") {
		switch s {
		case "", ".":
			continue
		case "..":
			return "", &ArchiveError{name, "has a \"..\" segment, which would write outside the directory"}
		}
		if len(s) > inputtree.MaxNameLength {
			return "", &ArchiveError{name, fmt.Sprintf("has a name of %d bytes in its path, more than the %d bytes a file name may have (NAME_MAX; Execute refuses such input trees too)", len(s), inputtree.MaxNameLength)}
		}
		segs = append(segs, s)
	}
	return strings.Join(segs, "/"), nil
}

// checkLinkTarget refuses a symbolic link at p (clean) whose target
// leaves the tree.
func checkLinkTarget(name, p, target string) error {
	if target == "" || strings.HasPrefix(target, "/") {
		return &ArchiveError{name, fmt.Sprintf("is a symbolic link to %q, an absolute or empty path; links must stay inside the archive", target)}
	}
	if j := path.Join(path.Dir(p), target); j == ".." || strings.HasPrefix(j, "../") {
		return &ArchiveError{name, fmt.Sprintf("is a symbolic link to %q, which leads out of the archive", target)}
	}
	return nil
}

// dir returns the directory at p (clean), creating it and its parents.
// It refuses a directory deeper than an input tree may nest.
func (t *tree) dir(name, p string) (*dirNode, error) {
	n := t.root
	if p == "" {
		return n, nil
	}
	if depth := strings.Count(p, "/") + 1; depth > inputtree.MaxDepth {
		return nil, &ArchiveError{name, fmt.Sprintf("nests directories %d deep, more than the %d levels an input tree may have (Execute refuses deeper trees too); flatten the archive", depth, inputtree.MaxDepth)}
	}
	for _, s := range strings.Split(p, "/") {
		if _, ok := n.files[s]; ok {
			return nil, &ArchiveError{name, fmt.Sprintf("needs %q to be a directory, but the archive has a file there", s)}
		}
		if _, ok := n.links[s]; ok {
			return nil, &ArchiveError{name, fmt.Sprintf("needs %q to be a directory, but the archive has a symbolic link there (writing through links is refused)", s)}
		}
		sub, ok := n.dirs[s]
		if !ok {
			sub = newDirNode()
			n.dirs[s] = sub
		}
		n = sub
	}
	return n, nil
}

// parent returns the directory holding p and p's base name, refusing a
// name that is taken.
func (t *tree) parent(name, p string) (*dirNode, string, error) {
	if p == "" {
		return nil, "", &ArchiveError{name, "names the archive's root as a file"}
	}
	dirPath, base := path.Split(p)
	d, err := t.dir(name, strings.TrimSuffix(dirPath, "/"))
	if err != nil {
		return nil, "", err
	}
	_, f := d.files[base]
	_, l := d.links[base]
	_, sub := d.dirs[base]
	if f || l || sub {
		return nil, "", &ArchiveError{name, "appears twice in the archive (duplicate entries are refused)"}
	}
	return d, base, nil
}

func (t *tree) addDir(name, p string) error {
	if p != "" {
		if d, base, _ := t.lookupParent(p); d != nil {
			if _, ok := d.dirs[base]; ok {
				return nil // a directory listed again changes nothing
			}
		}
	}
	_, err := t.dir(name, p)
	return err
}

func (t *tree) lookupParent(p string) (*dirNode, string, bool) {
	n := t.root
	dir, base := path.Split(p)
	for _, s := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if s == "" {
			continue
		}
		sub, ok := n.dirs[s]
		if !ok {
			return nil, "", false
		}
		n = sub
	}
	return n, base, true
}

func (t *tree) addFile(name, p string, d digest.Digest, exec bool) error {
	dir, base, err := t.parent(name, p)
	if err != nil {
		return err
	}
	dir.files[base] = &repb.FileNode{Name: base, Digest: d.Proto(), IsExecutable: exec}
	return nil
}

func (t *tree) addLink(name, p, target string) error {
	if err := checkLinkTarget(name, p, target); err != nil {
		return err
	}
	dir, base, err := t.parent(name, p)
	if err != nil {
		return err
	}
	dir.links[base] = target
	return nil
}

// file returns the file at p (clean), for hard links.
func (t *tree) file(p string) (*repb.FileNode, bool) {
	d, base, ok := t.lookupParent(p)
	if !ok {
		return nil, false
	}
	f, ok := d.files[base]
	return f, ok
}

// store writes every Directory message to cas and returns the root's
// digest.
func (t *tree) store(ctx context.Context, cas blobstore.Store, fn digest.Function) (digest.Digest, error) {
	return storeDir(ctx, cas, fn, t.root)
}

func storeDir(ctx context.Context, cas blobstore.Store, fn digest.Function, n *dirNode) (digest.Digest, error) {
	out := &repb.Directory{}
	for _, name := range sortedKeys(n.dirs) {
		d, err := storeDir(ctx, cas, fn, n.dirs[name])
		if err != nil {
			return digest.Digest{}, err
		}
		out.Directories = append(out.Directories, &repb.DirectoryNode{Name: name, Digest: d.Proto()})
	}
	for _, name := range sortedKeys(n.files) {
		out.Files = append(out.Files, n.files[name])
	}
	for _, name := range sortedKeys(n.links) {
		out.Symlinks = append(out.Symlinks, &repb.SymlinkNode{Name: name, Target: n.links[name]})
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(out)
	if err != nil {
		return digest.Digest{}, err
	}
	d := digest.Compute(fn, data)
	if err := blobstore.Put(ctx, cas, d, data); err != nil {
		return digest.Digest{}, err
	}
	return d, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
