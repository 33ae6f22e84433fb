package inputtree

import (
	"fmt"
	"path"
	"strings"
)

// OutputField names the Command field an output path comes from: the
// fields differ in what their paths may name.
type OutputField int

// The Command's output fields.
const (
	// OutputPaths is output_paths (REAPI 2.1+): a file, a directory or a
	// symbolic link, whatever the action leaves there.
	OutputPaths OutputField = iota
	// OutputFiles is output_files (REAPI 2.0): a file.
	OutputFiles
	// OutputDirectories is output_directories (REAPI 2.0): a directory.
	OutputDirectories
)

// String is the field's name in the Command message.
func (f OutputField) String() string {
	switch f {
	case OutputFiles:
		return "output_files"
	case OutputDirectories:
		return "output_directories"
	}
	return "output_paths"
}

// PathError is an output path or working directory that breaks the
// Remote Execution API's rules. Callers map it to INVALID_ARGUMENT:
// the same Command can never run.
type PathError struct {
	// Field is the Command field ("working_directory", "output_files"...).
	Field string
	// Path is the path as the Command spells it.
	Path string
	// Problem says what is wrong and what to do instead.
	Problem string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("%s %q %s", e.Field, e.Path, e.Problem)
}

// WorkingDirectory checks the Command's working directory and returns
// where it lies in the input root: a clean slash-separated path, "" for
// the root itself. Whether it names a directory of the input tree is the
// worker's to check, against the tree.
func WorkingDirectory(wd string) (string, error) {
	if wd == "" {
		return "", nil
	}
	if problem := formProblem(wd); problem != "" {
		return "", &PathError{Field: "working_directory", Path: wd, Problem: problem + "; the working directory is relative to the input root"}
	}
	loc := path.Clean(wd)
	if escapes(loc) {
		return "", &PathError{Field: "working_directory", Path: wd, Problem: "leads outside the input root; name a directory inside it"}
	}
	return rootRel(loc), nil
}

// OutputLocation is the one rule for where an output lies, applied by
// Execute's validation and by the worker alike: output path p, from
// field, is relative to the working directory wd (which is relative to
// the input root); joined with wd it must stay inside the input root.
// It returns that location relative to the root, lexically cleaned: ""
// for the root itself. "." and "" (the spec's "entire working directory"
// for output_directories) name the working directory; a path may climb
// out of the working directory ("../../../install") as long as it stays
// inside the root. An output file must end with a name.
//
// The check is lexical: a symbolic link of the input tree, or one the
// action makes, can still lead elsewhere, so the worker resolves the
// location against the tree before the action runs and against the file
// system after it.
func OutputLocation(field OutputField, wd, p string) (string, error) {
	wloc, err := WorkingDirectory(wd)
	if err != nil {
		return "", err
	}
	if p == "" {
		if field == OutputFiles {
			return "", &PathError{Field: field.String(), Path: p, Problem: "is empty; an output file must name a file relative to the working directory"}
		}
		return wloc, nil
	}
	if problem := formProblem(p); problem != "" {
		return "", &PathError{Field: field.String(), Path: p, Problem: problem + "; output paths are relative to the working directory"}
	}
	if last := p[strings.LastIndexByte(p, '/')+1:]; field == OutputFiles && (last == "." || last == "..") {
		return "", &PathError{Field: field.String(), Path: p, Problem: fmt.Sprintf("ends in %q, which names a directory; an output file must end with a file name (declare a directory in output_directories or output_paths)", last)}
	}
	loc := path.Join(wloc, p)
	if escapes(loc) {
		wdText := "the input root"
		if wloc != "" {
			wdText = fmt.Sprintf("the working directory %q", wd)
		}
		return "", &PathError{Field: field.String(), Path: p, Problem: fmt.Sprintf("leads outside the input root (from %s it climbs to %q); output paths are relative to the working directory and must stay inside the input root", wdText, loc)}
	}
	return rootRel(loc), nil
}

// formProblem checks the form the spec gives every such path: relative,
// '/'-separated, no trailing slash, no empty segment. "." and ".."
// segments are allowed; where they lead is checked after.
func formProblem(p string) string {
	switch {
	case strings.HasPrefix(p, "/"):
		return "is absolute; it must be relative"
	case strings.HasSuffix(p, "/"):
		return "ends with '/'; drop the trailing slash"
	case strings.Contains(p, "//"):
		return "has an empty segment ('//'); separate segments with single slashes"
	case strings.ContainsRune(p, 0):
		return "contains a NUL byte"
	}
	return ""
}

// escapes reports whether the clean path loc climbs above the root.
func escapes(loc string) bool {
	return loc == ".." || strings.HasPrefix(loc, "../")
}

// rootRel turns a clean path into the root-relative form: "" for ".".
func rootRel(loc string) string {
	if loc == "." {
		return ""
	}
	return loc
}
