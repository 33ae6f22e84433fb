package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/worker/execroot"
	"github.com/gantry-build/gantry/internal/worker/persistent"
	"github.com/gantry-build/gantry/internal/worker/runner"
)

// toolInputProperty is the node property Bazel
// (--experimental_remote_mark_tool_inputs) puts on the files of the tool.
const toolInputProperty = "bazel_tool_input"

// persistentSpec reads how j runs on a persistent worker: it carries
// persistentWorkerKey and its last argument names the request file
// (@FILE or --flagfile=FILE). ok is false for every other action, and for
// actions the worker runs wrapped (a persistent process would outlive
// the wrapper), with a file size limit or in chroot mode: those run as
// plain commands, the tool reading its request file itself, as the
// protocol's fallback intends. A sandboxed action's process runs in the
// sandbox (sandboxConfiner).
func (e *executor) persistentSpec(j *job) (spec persistent.Spec, requestFiles []string, ok bool, err error) {
	if e.pool == nil {
		return spec, nil, false, nil
	}
	props := properties(j.action, j.cmd)
	key := propertyValue(props, platform.PersistentWorkerKey)
	sandboxed := e.wrap.sandboxes(j.action, j.cmd)
	if key == "" || len(e.wrap.base) > 0 || e.wrap.prlimit != "" || (sandboxed && e.wrap.chroot) || otherWrapper(props) {
		return spec, nil, false, nil
	}
	startup, requestFiles := splitWorkerArgs(j.cmd.Arguments)
	if requestFiles == nil {
		return spec, nil, false, nil
	}
	proto, err := persistent.ParseProtocol(propertyValue(props, platform.PersistentWorkerProtocol))
	if err != nil {
		return spec, nil, false, failf(codes.InvalidArgument, "action %s: platform property %s: %v", j.ad, platform.PersistentWorkerProtocol, err)
	}
	env := make([]string, len(j.cmd.EnvironmentVariables))
	for i, ev := range j.cmd.EnvironmentVariables {
		env[i] = ev.Name + "=" + ev.Value
	}
	mx := propertyValue(props, platform.SupportsMultiplexWorkers)
	spec = persistent.Spec{Key: key, Args: startup, Env: env, WorkingDirectory: j.cmd.WorkingDirectory,
		Protocol: proto, Multiplex: mx == "1" || mx == "true"}
	if sandboxed {
		pol, err := e.wrap.sandboxPolicy(j.action, j.cmd)
		if err != nil {
			return spec, nil, false, failf(codes.InvalidArgument, "action %s: %v", j.ad, err)
		}
		spec.Confiner, spec.ConfineKey = sandboxConfiner{e.sb, pol}, fmt.Sprintf("%+v", pol)
	}
	return spec, requestFiles, true, nil
}

// otherWrapper reports whether the action names a process wrapper other
// than the sandbox: a persistent process would outlive it.
func otherWrapper(p *repb.Platform) bool {
	for _, prop := range p.GetProperties() {
		if prop.Name == platform.ProcessWrapper && prop.Value != SandboxWrapper {
			return true
		}
	}
	return false
}

// splitWorkerArgs separates, as Bazel does for its persistent workers,
// the arguments that start the tool from the request files: every @FILE
// and --flagfile=FILE argument is one. The last argument must be one
// (requestFiles is nil otherwise: not a persistent worker's action).
func splitWorkerArgs(args []string) (startup, requestFiles []string) {
	if len(args) < 2 || flagFile(args[len(args)-1]) == "" {
		return nil, nil
	}
	for _, a := range args[1:] {
		if f := flagFile(a); f != "" {
			requestFiles = append(requestFiles, f)
		}
	}
	for _, a := range args {
		if len(startup) == 0 || flagFile(a) == "" {
			startup = append(startup, a)
		}
	}
	return startup, requestFiles
}

// flagFile is the file a @FILE or --flagfile=FILE argument names ("" for
// other arguments; "@@x" is not one).
func flagFile(arg string) string {
	switch {
	case strings.HasPrefix(arg, "@") && !strings.HasPrefix(arg, "@@"):
		return arg[1:]
	case strings.HasPrefix(arg, "--flagfile="):
		return strings.TrimPrefix(arg, "--flagfile=")
	}
	return ""
}

// PersistentStats is what the worker's persistent worker pool did, by
// persistentWorkerKey; nil when worker.persistent_workers is off.
func (w *Worker) PersistentStats() []persistent.KeyStats {
	if w.pool == nil {
		return nil
	}
	return w.pool.Stats()
}

func propertyValue(p *repb.Platform, name string) string {
	for _, prop := range p.GetProperties() {
		if prop.Name == name {
			return prop.Value
		}
	}
	return ""
}

// executePersistent runs j as one WorkRequest on a persistent process of
// the pool; the response's output becomes the action's stderr.
func (e *executor) executePersistent(ctx context.Context, j *job, root *execroot.Root, spec persistent.Spec, requestFiles []string) (*execution, error) {
	var reqArgs []string
	for _, f := range requestFiles {
		args, err := readRequestFile(root.WorkDir, f, 0)
		if err != nil {
			return nil, failf(codes.InvalidArgument, "action %s: its request file %s cannot be read (%v); list it among the inputs", j.ad, f, err)
		}
		reqArgs = append(reqArgs, args...)
	}
	inputs, tools, err := listInputs(ctx, j.cas, j.ad.Function, j.action.InputRootDigest)
	if err != nil {
		return nil, failf(codes.Internal, "action %s: listing its inputs for the persistent worker: %v", j.ad, err)
	}
	var outs []string
	for _, o := range append(append(append([]string{}, j.cmd.OutputPaths...), j.cmd.OutputFiles...), j.cmd.OutputDirectories...) {
		outs = append(outs, path.Join(j.cmd.WorkingDirectory, o))
	}
	act := persistent.Action{ExecRoot: root.Dir, Tools: tools, Outputs: outs,
		Request: persistent.Request{Arguments: reqArgs, Inputs: inputs}}
	if j.action.Timeout != nil {
		act.Timeout = j.action.Timeout.AsDuration()
	}
	ex := &execution{timeout: act.Timeout}
	var streams runner.Spec
	if ex.stdout, ex.stderr, err = e.capture(j, &streams); err != nil {
		return nil, err
	}
	// The request is an action like any other to the heartbeat loop
	// (suspend, resume) and the disk guard (kill).
	started := false
	act.Started = func(c persistent.Control) {
		started = true
		e.tracker.started(j.lease, c, root.Dir, c.Kill)
	}
	o, err := e.pool.Do(ctx, spec, act)
	if started {
		ex.disk = e.tracker.exited(j.lease)
	}
	if err == nil {
		_, err = streams.StderrFile.WriteString(o.Output)
	}
	streams.StdoutFile.Close()
	streams.StderrFile.Close()
	ex.stdout.finish()
	ex.stderr.finish()
	switch {
	case ctx.Err() != nil:
		ex.res = runner.Result{Cancelled: true, ExitCode: -1}
		return ex, nil
	case errors.Is(err, persistent.ErrStart):
		return nil, failf(codes.InvalidArgument, "action %s: %v", j.ad, err)
	case err != nil:
		return nil, failf(codes.Internal, "action %s: %v", j.ad, err)
	}
	ex.res = runner.Result{ExitCode: int(o.ExitCode), TimedOut: o.TimedOut, Cancelled: o.Killed, WallTime: o.Duration}
	return ex, nil
}

// maxFlagFileDepth bounds request files naming request files.
const maxFlagFileDepth = 8

// readRequestFile reads the arguments of a request file, one a line, as
// Bazel writes it for a persistent worker; a line naming a request file
// is replaced by its arguments, as Bazel does.
func readRequestFile(workDir, name string, depth int) ([]string, error) {
	if depth > maxFlagFileDepth {
		return nil, fmt.Errorf("request files nest more than %d deep", maxFlagFileDepth)
	}
	p := name
	if !filepath.IsAbs(p) {
		p = filepath.Join(workDir, p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil, nil
	}
	var args []string
	for _, line := range strings.Split(s, "\n") {
		if f := flagFile(line); f != "" {
			more, err := readRequestFile(workDir, f, depth+1)
			if err != nil {
				return nil, err
			}
			args = append(args, more...)
			continue
		}
		args = append(args, line)
	}
	return args, nil
}

// listInputs walks the input tree: every file with its digest (the
// WorkRequest's inputs), and those marked as tool inputs.
func listInputs(ctx context.Context, cas blobstore.Store, fn digest.Function, root *repb.Digest) (inputs []persistent.Input, tools []string, err error) {
	rd, err := digest.FromProto(fn, root)
	if err != nil {
		return nil, nil, err
	}
	type dir struct {
		d    digest.Digest
		path string
	}
	level := []dir{{rd, ""}}
	for depth := 0; len(level) > 0; depth++ {
		if depth > execroot.MaxDepth {
			return nil, nil, errors.New("the input tree is too deep")
		}
		ds := make([]digest.Digest, len(level))
		for i, l := range level {
			ds[i] = l.d
		}
		data, errs := blobstore.GetBatch(ctx, cas, ds)
		var next []dir
		for i, l := range level {
			if errs[i] != nil {
				return nil, nil, errs[i]
			}
			msg := &repb.Directory{}
			if err := proto.Unmarshal(data[i], msg); err != nil {
				return nil, nil, err
			}
			for _, f := range msg.Files {
				p := path.Join(l.path, f.Name)
				inputs = append(inputs, persistent.Input{Path: p, Digest: []byte(f.GetDigest().GetHash())})
				for _, np := range f.GetNodeProperties().GetProperties() {
					if np.Name == toolInputProperty {
						tools = append(tools, p)
						break
					}
				}
			}
			for _, sd := range msg.Directories {
				d, err := digest.FromProto(fn, sd.Digest)
				if err != nil {
					return nil, nil, err
				}
				next = append(next, dir{d, path.Join(l.path, sd.Name)})
			}
		}
		level = next
	}
	return inputs, tools, nil
}
