package job

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gantry-build/gantry/internal/batch"
	"github.com/gantry-build/gantry/internal/remote"
)

// CommandSpec is the remote spec of a job-list job: its inputs and
// outputs, relative to its directory.
func CommandSpec(j *batch.Job) (remote.Spec, error) {
	spec, err := remote.LocalSpec(j.Dir, j.Args, j.Env, j.Inputs, j.Outputs, j.OutputDirs)
	if err != nil {
		return spec, fmt.Errorf("job %s: %w", j.Name, err)
	}
	spec.Platform = append([]string(nil), j.Platform...)
	spec.Timeout, spec.NoCache = j.Timeout, j.NoCache
	return spec, nil
}

// makeOutputDir creates the directory of output out (absolute) of a job
// in directory dir. Below dir, where a result may have left symbolic
// links, it never goes through one: a link in the way is left for the
// download to report (or, for a local compile, the compiler to follow as
// it would without gantry).
func makeOutputDir(dir, out string) error {
	rel, err := filepath.Rel(dir, out)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return os.MkdirAll(filepath.Dir(out), 0o755) // not a remote output
	}
	if err := remote.MakeOutputParents(dir, filepath.ToSlash(rel)); err != nil && !errors.Is(err, remote.ErrLinkInTheWay) {
		return err
	}
	return nil
}

// absIn is path p of a job in directory dir, made absolute.
func absIn(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
