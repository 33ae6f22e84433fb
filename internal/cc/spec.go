package cc

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/gantry-build/gantry/internal/remote"
)

// Options are what Spec needs besides the compile itself.
type Options struct {
	// Settings are the launcher's settings (SettingsFromEnv).
	Settings Settings
	// Env is the local environment (os.Environ()): the dependency listing
	// runs with it, and the remote command gets its locale variables.
	Env []string
	// Identities finds the compiler's identity; share one per process.
	Identities *Identities
	// Deps is the direct-mode dependency cache; nil lists every time.
	Deps *DepsCache
	// Log receives debug lines (cache hits, the layout); nil discards them.
	Log *slog.Logger
}

// localEnv are the variables that make the local compiler read files or
// write outputs the launcher does not see: compiles with them set run
// locally.
var localEnv = []string{"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES"}

// remoteEnv are passed to the remote compile from the local environment:
// the locale (message language) and the reproducible-build timestamp.
var remoteEnv = []string{"LANG", "LC_ALL", "LC_MESSAGES", "SOURCE_DATE_EPOCH"}

// Spec finds the compile's inputs (from the direct-mode cache, or by
// running the compiler's dependency listing locally) and returns the
// remote command. A *LocalError (IsLocal) says the compile must run
// locally after all, for example when the project root would be "/".
func (c *Compile) Spec(ctx context.Context, o Options) (remote.Spec, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, e := range o.Env {
		for _, name := range localEnv {
			if strings.HasPrefix(e, name+"=") && len(e) > len(name)+1 {
				return remote.Spec{}, local("%s is set", name)
			}
		}
	}
	id, err := o.Identities.Get(ctx, c.Compiler)
	if err != nil {
		return remote.Spec{}, err
	}
	key := c.depsKey(id, o.Env)
	deps, hit := o.Deps.get(key)
	if hit {
		log.Debug("cc: direct-mode cache hit", "source", c.Source)
	} else {
		if deps, err = c.listDeps(ctx, o.Env); err != nil {
			return remote.Spec{}, err
		}
		if err := o.Deps.put(key, c.Cwd, deps); err != nil {
			log.Debug("cc: not caching the dependency listing", "err", err)
		}
	}
	l, err := c.plan(id, deps.Listed, o.Settings)
	if err != nil {
		return remote.Spec{}, err
	}
	c.layout, c.deps = l, deps
	env := []string{"PATH=" + o.Settings.RemotePath}
	for _, e := range o.Env {
		for _, name := range remoteEnv {
			if strings.HasPrefix(e, name+"=") {
				env = append(env, e)
			}
		}
	}
	return remote.Spec{
		Args:        l.args,
		Env:         env,
		LocalRoot:   l.root,
		WorkingDir:  l.workdir,
		Inputs:      l.inputs,
		OutputFiles: []string{l.output},
		Platform:    o.Settings.Platform,
		Salt:        id.Salt,
	}, nil
}

// DepFile is the dependency file -MD/-MMD asked for: its path (as given,
// relative to the working directory or absolute) and content; "" when
// none was asked for. Valid after Spec.
func (c *Compile) DepFile() (string, []byte) {
	if c.depMode == "" || c.deps == nil {
		return "", nil
	}
	return c.depFile, c.deps.DepFile
}

// WriteDepFile writes the dependency file -MD/-MMD asked for, if any,
// atomically. Call it after the remote compile ran, whatever its exit
// code: gcc writes the file even when the compile fails after
// preprocessing.
func (c *Compile) WriteDepFile() error {
	name, data := c.DepFile()
	if name == "" {
		return nil
	}
	if !filepath.IsAbs(name) {
		name = filepath.Join(c.Cwd, name)
	}
	if err := writeFileAtomic(name, data); err != nil {
		return fmt.Errorf("cc: writing the dependency file: %w", err)
	}
	return nil
}

// String describes the compile and, after Spec, its layout (for -v).
func (c *Compile) String() string {
	if c.layout == nil {
		return c.Source
	}
	return fmt.Sprintf("%s: root %s, working directory %q, %d inputs", c.Source, c.layout.root, c.layout.workdir, len(c.layout.inputs))
}
