package worker

import (
	"fmt"
	"os/exec"
	"strconv"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/worker/sandbox"
)

// wrapping decides what runs in front of an action's command: the
// worker's wrapper, the process wrappers the action names, the sandbox,
// and prlimit for the file size limit.
type wrapping struct {
	workerID string
	// base is worker.wrapper, for every action; named are the
	// process_wrappers actions select.
	base  []string
	named map[string][]string
	// sandboxed: the sandbox exists; all: every action runs in it;
	// chroot: with its input root as "/" (sandbox mode chroot).
	sandboxed, all, chroot bool
	limits                 sandbox.Limits
	// prlimit is the prlimit binary that sets maxFileSize ("" when off).
	prlimit     string
	maxFileSize int64
}

// newWrapping reads the wrapping of actions from the worker's
// configuration; hasSandbox says the worker built its sandbox, prlimit is
// the binary that enforces cfg.MaxFileSize ("" when off).
func newWrapping(cfg Config, hasSandbox bool, prlimit string) wrapping {
	wr := wrapping{workerID: cfg.ID, base: cfg.Wrapper, named: cfg.ProcessWrappers,
		sandboxed: hasSandbox, all: hasSandbox && cfg.SandboxAll, prlimit: prlimit, maxFileSize: cfg.MaxFileSize}
	if cfg.Sandbox != nil {
		wr.limits = cfg.Sandbox.Limits
		wr.chroot = hasSandbox && cfg.Sandbox.Chroot
	}
	return wr
}

// wrap applies the action's special platform properties: process-wrapper
// names select configured command prefixes (in the order given), and
// max-cores is passed to the action as GANTRY_MAX_CORES.
//
// sandboxed says the action runs in the bubblewrap sandbox (the worker runs
// every action there, or the action named it as a process wrapper); the
// other wrappers then run inside it, so their programs are resolved here.
func (wr wrapping) wrap(action *repb.Action, cmd *repb.Command, env []string) (wrapper, outEnv []string, sandboxed bool, err error) {
	sandboxed = wr.sandboxes(action, cmd)
	var parts [][]string
	if len(wr.base) > 0 {
		parts = append(parts, wr.base)
	}
	for _, prop := range properties(action, cmd).GetProperties() {
		switch prop.Name {
		case platform.ProcessWrapper:
			if (prop.Value == SandboxWrapper && wr.sandboxed && !wr.chroot) || (prop.Value == ChrootWrapper && wr.chroot) {
				continue
			}
			argv, ok := wr.named[prop.Value]
			if !ok {
				return nil, nil, false, fmt.Errorf("process wrapper %q is not configured on worker %s", prop.Value, wr.workerID)
			}
			parts = append(parts, argv)
		case platform.MaxCores:
			env = append(env, "GANTRY_MAX_CORES="+prop.Value)
		}
	}
	for _, argv := range parts {
		if sandboxed {
			if argv, err = resolveWrappers(argv); err != nil {
				return nil, nil, false, err
			}
		}
		wrapper = append(wrapper, argv...)
	}
	return wrapper, env, sandboxed, nil
}

// sandboxes says whether the action runs in the bubblewrap sandbox: the
// worker runs every action there, or the action names it as a process
// wrapper. The InputFetch stage asks too: only a sandboxed action can
// take input directories whole (fetch.go).
func (wr wrapping) sandboxes(action *repb.Action, cmd *repb.Command) bool {
	if wr.all {
		return true
	}
	if !wr.sandboxed {
		return false
	}
	for _, prop := range properties(action, cmd).GetProperties() {
		if prop.Name == platform.ProcessWrapper && prop.Value == SandboxWrapper {
			return true
		}
	}
	return false
}

// properties are the action's platform properties (the Command's, for
// clients of REAPI before 2.2, when the Action has none).
func properties(action *repb.Action, cmd *repb.Command) *repb.Platform {
	if p := action.Platform; p != nil && len(p.Properties) > 0 {
		return p
	}
	return cmd.Platform
}

// sandboxPolicy reads the action's sandbox properties.
func (wr wrapping) sandboxPolicy(action *repb.Action, cmd *repb.Command) (sandbox.Policy, error) {
	p := properties(action, cmd)
	props := make([]sandbox.Property, 0, len(p.GetProperties()))
	for _, pp := range p.GetProperties() {
		props = append(props, sandbox.Property{Name: pp.Name, Value: pp.Value})
	}
	return sandbox.ParsePolicy(props, wr.limits)
}

// fileSize puts prlimit --fsize in front of an action's wrappers (so that
// it also covers the sandbox), when max_file_size is set.
func (wr wrapping) fileSize(wrapper []string) []string {
	if wr.prlimit == "" {
		return wrapper
	}
	return append([]string{wr.prlimit, "--fsize=" + strconv.FormatInt(wr.maxFileSize, 10), "--"}, wrapper...)
}

// resolveWrappers makes a wrapper's program an absolute path: inside the
// sandbox it would be looked up in the action's PATH, not the worker's.
func resolveWrappers(argv []string) ([]string, error) {
	if len(argv) == 0 {
		return argv, nil
	}
	p, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("wrapper %q: %w; fix the worker's wrapper configuration", argv[0], err)
	}
	return append([]string{p}, argv[1:]...), nil
}
