package cc

import (
	"context"
	"errors"
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
	// Scanner is the include scanner, used when Settings.Scanner is set;
	// share one per process. nil always uses the dependency listing.
	Scanner *Scanner
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

// Spec finds the compile's inputs (with the include scanner when the
// settings allow it and no dependency file is asked for; otherwise from
// the direct-mode cache, or by running the compiler's dependency listing
// locally) and returns the remote command. A compile the scanner cannot
// follow (a computed include) falls back to the listing. A *LocalError (IsLocal) says the compile must run
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
	if o.Settings.Scanner && o.Scanner != nil && c.depMode == "" {
		scanned, err := o.Scanner.scan(ctx, c, id, o.Env)
		var cs *cannotScan
		switch {
		case err == nil:
			spec, err := c.finish(id, scanned, o)
			if _, isLocal := IsLocal(err); !isLocal {
				c.scanned = err == nil
				return spec, err
			}
			// A header of a dead branch may have widened the project
			// root too much: the listing decides.
			log.Debug("cc: using the dependency listing", "source", c.Source, "reason", err)
		case errors.As(err, &cs):
			log.Debug("cc: using the dependency listing", "source", c.Source, "reason", cs.reason)
		default:
			return remote.Spec{}, err
		}
	}
	deps, err := c.listed(ctx, id, o, log)
	if err != nil {
		return remote.Spec{}, err
	}
	return c.finish(id, deps, o)
}

// Scanned reports whether the last Spec's inputs came from the include
// scanner rather than the compiler's dependency listing. When a remote
// compile of such a Spec fails, Relist gives the Spec to retry with.
func (c *Compile) Scanned() bool { return c.scanned }

// Relist is Spec with the inputs from the compiler's dependency listing
// (or the direct-mode cache), never the include scanner: the safety net
// for a remote compile of a scanned Spec that failed. missed reports
// whether the listing named a file the previous Spec did not send; when
// it is false the retry would fail the same way (a genuine compile
// error) and can be skipped. After Relist, Scanned is false.
func (c *Compile) Relist(ctx context.Context, o Options) (spec remote.Spec, missed bool, err error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id, err := o.Identities.Get(ctx, c.Compiler)
	if err != nil {
		return remote.Spec{}, false, err
	}
	deps, err := c.listed(ctx, id, o, log)
	if err != nil {
		return remote.Spec{}, false, err
	}
	had := map[string]bool{}
	if c.deps != nil {
		for _, p := range c.deps.Listed {
			had[c.absPath(p)] = true
		}
	}
	for _, p := range deps.Listed {
		if !had[c.absPath(p)] {
			missed = true
			log.Debug("cc: the include scanner missed a file", "source", c.Source, "file", p)
		}
	}
	c.scanned = false
	spec, err = c.finish(id, deps, o)
	return spec, missed, err
}

// absPath is p (relative to the working directory or absolute) absolute
// and clean.
func (c *Compile) absPath(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(c.Cwd, p)
}

// listed finds the inputs with the direct-mode cache or the compiler's
// dependency listing.
func (c *Compile) listed(ctx context.Context, id *Identity, o Options, log *slog.Logger) (*depsResult, error) {
	key := c.depsKey(id, o.Env)
	deps, hit := o.Deps.get(key)
	if hit {
		log.Debug("cc: direct-mode cache hit", "source", c.Source)
		return deps, nil
	}
	deps, err := c.listDeps(ctx, o.Env)
	if err != nil {
		return nil, err
	}
	if err := o.Deps.put(key, c.Cwd, deps); err != nil {
		log.Debug("cc: not caching the dependency listing", "err", err)
	}
	return deps, nil
}

// finish lays the compile out from its inputs and returns the remote
// command.
func (c *Compile) finish(id *Identity, deps *depsResult, o Options) (remote.Spec, error) {
	l, err := c.plan(id, deps, o.Settings)
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
	name = filepath.Clean(name)
	var err error
	if under(name, c.Cwd) && name != c.Cwd {
		// Where outputs go, and a result may have left symbolic links:
		// never through one, as the object file.
		err = remote.WriteOutputFile(c.Cwd, slashRel(c.Cwd, name), data)
	} else {
		err = writeFileAtomic(name, data)
	}
	if err != nil {
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
