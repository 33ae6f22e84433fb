package remote

import (
	"path/filepath"
	"strings"
)

// Layout chooses the input root for a command run in cwd that uses paths
// (absolute, or relative to cwd): root is the deepest directory that
// contains cwd and every path, and workdir is cwd relative to root,
// slash-separated ("" when cwd is the root). cwd must be absolute. A root
// of "/" is possible; callers that do not want to send a whole file system
// view should check for it.
func Layout(cwd string, paths []string) (root, workdir string) {
	root = filepath.Clean(cwd)
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		root = commonAncestor(root, filepath.Clean(p))
	}
	rel, err := filepath.Rel(root, filepath.Clean(cwd))
	if err != nil || rel == "." {
		return root, ""
	}
	return root, filepath.ToSlash(rel)
}

// commonAncestor is the deepest directory containing both clean absolute
// paths a and b.
func commonAncestor(a, b string) string {
	for !within(b, a) {
		a = filepath.Dir(a)
	}
	return a
}

// within reports whether clean absolute path p is dir or under it.
func within(p, dir string) bool {
	if p == dir || dir == string(filepath.Separator) {
		return true
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}
