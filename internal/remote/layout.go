package remote

import (
	"fmt"
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

// DefaultPath is the PATH a command gets when its environment sets none:
// tools such as gcc find their helpers through PATH, and a fixed value
// keeps the cache key independent of the caller's shell.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// LocalSpec is the Spec of args run in directory dir (absolute) with the
// given inputs, output files and output directories (absolute, or
// relative to dir): the input root from Layout, every input placed at its
// path under it, the outputs relative to dir. env gets PATH=DefaultPath
// unless it sets PATH. The caller fills in the rest (platform, timeout,
// caching).
func LocalSpec(dir string, args, env, inputs, outputs, outputDirs []string) (Spec, error) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(dir, p)
	}
	root, wd := Layout(dir, inputs)
	spec := Spec{Args: args, LocalRoot: root, WorkingDir: wd}
	for _, in := range inputs {
		local := abs(in)
		rel, err := filepath.Rel(root, local)
		if err != nil {
			return Spec{}, fmt.Errorf("input %s: %w", in, err)
		}
		spec.Inputs = append(spec.Inputs, Input{Local: local, Path: filepath.ToSlash(rel)})
	}
	rel := func(what, p string) (string, error) {
		r, err := filepath.Rel(dir, abs(p))
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", what, p, err)
		}
		return filepath.ToSlash(r), nil
	}
	for _, o := range outputs {
		r, err := rel("output", o)
		if err != nil {
			return Spec{}, err
		}
		spec.OutputFiles = append(spec.OutputFiles, r)
	}
	for _, o := range outputDirs {
		r, err := rel("output directory", o)
		if err != nil {
			return Spec{}, err
		}
		spec.OutputDirs = append(spec.OutputDirs, r)
	}
	spec.Env = append([]string(nil), env...)
	hasPath := false
	for _, e := range env {
		hasPath = hasPath || strings.HasPrefix(e, "PATH=")
	}
	if !hasPath {
		spec.Env = append(spec.Env, "PATH="+DefaultPath)
	}
	return spec, nil
}
