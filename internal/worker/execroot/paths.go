package execroot

import (
	"path"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// declaredOutputs checks the Command's working directory and output paths
// lexically and returns the outputs in effect: output_paths if set (v2.1+),
// else the legacy output_files and output_directories. Unsorted lists are
// tolerated; duplicates and overlaps the spec forbids are not.
func declaredOutputs(cmd *repb.Command) ([]string, error) {
	if err := checkRelPath("working directory", cmd.WorkingDirectory, true, false); err != nil {
		return nil, err
	}
	if len(cmd.OutputPaths) > 0 {
		seen := make(map[string]bool, len(cmd.OutputPaths))
		for _, p := range cmd.OutputPaths {
			if err := checkRelPath("output path", p, true, true); err != nil {
				return nil, err
			}
			if seen[p] {
				return nil, invalidf(p, "output_paths lists this path twice; output paths must be unique")
			}
			seen[p] = true
		}
		return cmd.OutputPaths, nil
	}
	files := make(map[string]bool, len(cmd.OutputFiles))
	for _, p := range cmd.OutputFiles {
		if err := checkRelPath("output file", p, false, true); err != nil {
			return nil, err
		}
		if files[p] {
			return nil, invalidf(p, "output_files lists this path twice; output files must be unique")
		}
		files[p] = true
	}
	dirs := make(map[string]bool, len(cmd.OutputDirectories))
	for _, p := range cmd.OutputDirectories {
		if err := checkRelPath("output directory", p, true, true); err != nil {
			return nil, err
		}
		if dirs[p] {
			return nil, invalidf(p, "output_directories lists this path twice; output directories must be unique")
		}
		if files[p] {
			return nil, invalidf(p, "the path is both an output file and an output directory; declare it as one of them")
		}
		dirs[p] = true
	}
	// An output file cannot be a parent of another output: the worker
	// would have to create it as a directory.
	all := append(append([]string(nil), cmd.OutputFiles...), cmd.OutputDirectories...)
	for _, p := range all {
		for q := path.Dir(path.Clean(p)); q != "." && q != "/" && q != ".."; q = path.Dir(q) {
			if files[q] {
				return nil, invalidf(q, "the output file %q is a parent of output %q; an output file cannot contain other outputs", q, p)
			}
		}
	}
	return all, nil
}

// checkRelPath enforces the spec's form of output paths and the working
// directory: relative, '/'-separated, no leading or trailing slash, no
// empty segments, and for outputs a last segment that is a name. "." and
// ".." segments are allowed otherwise; whether the path stays inside the
// input root is decided against the input tree.
func checkRelPath(what, p string, allowEmpty, output bool) error {
	switch {
	case p == "":
		if allowEmpty {
			return nil
		}
		return invalidf(p, "the %s is empty; name a path relative to the working directory", what)
	case strings.HasPrefix(p, "/"):
		return invalidf(p, "the %s is absolute; it must be relative (to the working directory, or for the working directory to the input root)", what)
	case strings.HasSuffix(p, "/"):
		return invalidf(p, "the %s ends with '/'; drop the trailing slash", what)
	case strings.Contains(p, "//"):
		return invalidf(p, "the %s has an empty segment ('//'); separate segments with single slashes", what)
	case strings.ContainsRune(p, 0):
		return invalidf(p, "the %s contains a NUL byte", what)
	}
	last := p[strings.LastIndexByte(p, '/')+1:]
	if output && (last == "." || last == "..") {
		return invalidf(p, "the %s ends in %q; it must end with a name", what, last)
	}
	return nil
}
