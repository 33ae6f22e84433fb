package execroot

import (
	"errors"
	"path"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/inputtree"
)

// declaredOutputs checks the Command's working directory and output paths
// with the rule Execute applies (inputtree.OutputLocation) and returns the
// outputs in effect: output_paths if set (v2.1+), else the legacy
// output_files and output_directories. Unsorted lists are tolerated;
// duplicates and overlaps the spec forbids are not.
func declaredOutputs(cmd *repb.Command) ([]string, error) {
	wd := cmd.WorkingDirectory
	if _, err := inputtree.WorkingDirectory(wd); err != nil {
		return nil, pathInvalid(err)
	}
	if len(cmd.OutputPaths) > 0 {
		seen := make(map[string]bool, len(cmd.OutputPaths))
		for _, p := range cmd.OutputPaths {
			if _, err := inputtree.OutputLocation(inputtree.OutputPaths, wd, p); err != nil {
				return nil, pathInvalid(err)
			}
			if seen[p] {
				return nil, invalidf(p, "output_paths lists this path twice; output paths must be unique")
			}
			seen[p] = true
		}
		return cmd.OutputPaths, nil
	}
	// files and dirs map each output's location in the root to its path.
	files := make(map[string]string, len(cmd.OutputFiles))
	for _, p := range cmd.OutputFiles {
		loc, err := inputtree.OutputLocation(inputtree.OutputFiles, wd, p)
		if err != nil {
			return nil, pathInvalid(err)
		}
		if _, dup := files[loc]; dup {
			return nil, invalidf(p, "output_files lists this path twice; output files must be unique")
		}
		files[loc] = p
	}
	dirs := make(map[string]bool, len(cmd.OutputDirectories))
	seenDirs := make(map[string]bool, len(cmd.OutputDirectories))
	for _, p := range cmd.OutputDirectories {
		loc, err := inputtree.OutputLocation(inputtree.OutputDirectories, wd, p)
		if err != nil {
			return nil, pathInvalid(err)
		}
		if seenDirs[p] {
			return nil, invalidf(p, "output_directories lists this path twice; output directories must be unique")
		}
		if _, ok := files[loc]; ok {
			return nil, invalidf(p, "the path is both an output file and an output directory; declare it as one of them")
		}
		seenDirs[p], dirs[loc] = true, true
	}
	// An output file cannot be a parent of another output: the worker
	// would have to create it as a directory.
	all := append(append([]string(nil), cmd.OutputFiles...), cmd.OutputDirectories...)
	for _, p := range all {
		loc, _ := inputtree.OutputLocation(inputtree.OutputPaths, wd, p)
		for q := path.Dir(loc); q != "." && q != "/"; q = path.Dir(q) {
			if f, ok := files[q]; ok {
				return nil, invalidf(f, "the output file %q is a parent of output %q; an output file cannot contain other outputs", f, p)
			}
		}
	}
	return all, nil
}

// pathInvalid turns the shared rule's refusal into an *InvalidError with
// the same message.
func pathInvalid(err error) error {
	var pe *inputtree.PathError
	if errors.As(err, &pe) {
		return invalidf(pe.Path, "%s", pe.Error())
	}
	return err
}
