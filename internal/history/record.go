package history

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/protocol"
)

// Operation is one finished operation as the history keeps it: who asked
// (instance, invocation keys, the client's RequestMetadata), what ran
// (the action, a label, the outputs) and how it went (timestamps, worker,
// status, exit code). Values are stored as JSON; fields are only ever
// added, so older records keep loading.
type Operation struct {
	Name     string `json:"name"`
	Instance string `json:"instance,omitempty"`
	// Action is the action digest ("HASH/SIZE") under Function.
	Action     string          `json:"action"`
	Function   digest.Function `json:"fn,omitempty"`
	Queue      string          `json:"queue,omitempty"`
	Invocation []string        `json:"invocation,omitempty"`
	// Build is the client's tool_invocation_id; Correlated its
	// correlated_invocations_id. BuildName is the name the client gave
	// the build (protocol.BuildNameHeader: Gantry's own commands send
	// their command line).
	Build       string `json:"build,omitempty"`
	BuildName   string `json:"build_name,omitempty"`
	Correlated  string `json:"correlated,omitempty"`
	Tool        string `json:"tool,omitempty"`
	ToolVersion string `json:"tool_version,omitempty"`
	Target      string `json:"target,omitempty"`
	Mnemonic    string `json:"mnemonic,omitempty"`
	// Label names the operation for people: the target and mnemonic the
	// client sent, else the program and its first output ("gcc → foo.o").
	Label string `json:"label"`

	Accepted time.Time `json:"accepted,omitzero"`
	Finished time.Time `json:"finished"`
	Worker   string    `json:"worker,omitempty"`
	// The worker's stage timestamps (its own clock).
	WorkerStart time.Time `json:"worker_start,omitzero"`
	FetchStart  time.Time `json:"fetch_start,omitzero"`
	FetchEnd    time.Time `json:"fetch_end,omitzero"`
	ExecStart   time.Time `json:"exec_start,omitzero"`
	ExecEnd     time.Time `json:"exec_end,omitzero"`
	UploadStart time.Time `json:"upload_start,omitzero"`
	UploadEnd   time.Time `json:"upload_end,omitzero"`
	WorkerEnd   time.Time `json:"worker_end,omitzero"`

	Code     codes.Code `json:"code,omitempty"`
	Message  string     `json:"message,omitempty"`
	ExitCode int32      `json:"exit_code,omitempty"`
	Cached   bool       `json:"cached,omitempty"`
	// Stdout and Stderr are the digests of the action's output streams
	// ("" when empty or inline).
	Stdout  string   `json:"stdout,omitempty"`
	Stderr  string   `json:"stderr,omitempty"`
	Outputs []Output `json:"outputs,omitempty"`
	// OutputBytes is the size of every output file, stdout and stderr.
	OutputBytes int64 `json:"output_bytes,omitempty"`
	// CPU is the CPU time (user and system) of the action's processes,
	// as a Gantry worker reports it (zero from other workers and for a
	// cache hit).
	CPU time.Duration `json:"cpu,omitempty"`
	// InputFiles and InputBytes size the action's input root, as a
	// Gantry worker reports it (zero from other workers and for a cache
	// hit).
	InputFiles int64 `json:"input_files,omitempty"`
	InputBytes int64 `json:"input_bytes,omitempty"`
	// Retries are the times the action was taken from a worker (lost,
	// pre-empted, suspended), oldest first.
	Retries []Retry `json:"retries,omitempty"`
	// Expected is the action's expected wall time from the scheduler's
	// duration history when it ran (0: none known), to the millisecond:
	// the status pages set it against the execution's time.
	Expected time.Duration `json:"expected,omitempty"`
}

// Retry is one time an operation's action was taken from (or stopped
// on) its worker: scheduler.Retry as the history stores it.
type Retry struct {
	At     time.Time `json:"at"`
	Worker string    `json:"worker,omitempty"`
	Kind   string    `json:"kind"`
	Reason string    `json:"reason,omitempty"`
}

// Output is one output of an operation's result.
type Output struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
	Dir    bool   `json:"dir,omitempty"`
	Link   string `json:"link,omitempty"` // a symlink's target
}

// maxOutputs bounds the outputs an Operation keeps (a page shows them;
// the ActionResult in the action cache has them all).
const maxOutputs = 200

// ActionDigest is the operation's action digest.
func (o Operation) ActionDigest() (digest.Digest, error) {
	return ParseDigest(o.Function, o.Action)
}

// ParseDigest reads a digest as an Operation keeps it ("HASH/SIZE")
// under fn.
func ParseDigest(fn digest.Function, s string) (digest.Digest, error) {
	h, size, ok := strings.Cut(s, "/")
	n, err := strconv.ParseInt(size, 10, 64)
	if !ok || err != nil {
		return digest.Digest{}, fmt.Errorf("history: %q is not a digest HASH/SIZE", s)
	}
	return digest.Parse(fn, h, n)
}

// Failed reports whether the operation failed: an error status or a
// non-zero exit code.
func (o Operation) Failed() bool { return o.Code != codes.OK || o.ExitCode != 0 }

// QueueTime is how long the operation waited before a worker took it
// (zero when unknown or a cache hit).
func (o Operation) QueueTime() time.Duration {
	if o.Accepted.IsZero() || o.WorkerStart.IsZero() || o.WorkerStart.Before(o.Accepted) {
		return 0
	}
	return o.WorkerStart.Sub(o.Accepted)
}

// FromFinished is the record of an operation the execution service saw
// finish at now.
func FromFinished(f protocol.Finished, now time.Time) Operation {
	resp := f.Response
	res := resp.GetResult()
	md := res.GetExecutionMetadata()
	op := Operation{
		Name: f.Name, Instance: f.Instance, Action: f.ActionDigest.Hash + "/" + itoa(f.ActionDigest.Size), Function: f.ActionDigest.Function, Queue: f.Queue,
		Invocation: f.Invocation, Accepted: f.Accepted, Finished: now,
		Worker:      md.GetWorker(),
		WorkerStart: stamp(md.GetWorkerStartTimestamp()), WorkerEnd: stamp(md.GetWorkerCompletedTimestamp()),
		FetchStart: stamp(md.GetInputFetchStartTimestamp()), FetchEnd: stamp(md.GetInputFetchCompletedTimestamp()),
		ExecStart: stamp(md.GetExecutionStartTimestamp()), ExecEnd: stamp(md.GetExecutionCompletedTimestamp()),
		UploadStart: stamp(md.GetOutputUploadStartTimestamp()), UploadEnd: stamp(md.GetOutputUploadCompletedTimestamp()),
		Code: codes.Code(resp.GetStatus().GetCode()), Message: resp.GetStatus().GetMessage(),
		ExitCode: res.GetExitCode(), Cached: resp.GetCachedResult(),
	}
	if m := f.Metadata; m != nil {
		op.Build, op.Correlated = m.GetToolInvocationId(), m.GetCorrelatedInvocationsId()
		op.Tool, op.ToolVersion = m.GetToolDetails().GetToolName(), m.GetToolDetails().GetToolVersion()
		op.Target, op.Mnemonic = m.GetTargetId(), m.GetActionMnemonic()
	}
	if op.Build != "" {
		op.BuildName = f.BuildName
	}
	if d := res.GetStdoutDigest(); d.GetSizeBytes() > 0 {
		op.Stdout = d.GetHash() + "/" + itoa(d.GetSizeBytes())
		op.OutputBytes += d.GetSizeBytes()
	}
	if d := res.GetStderrDigest(); d.GetSizeBytes() > 0 {
		op.Stderr = d.GetHash() + "/" + itoa(d.GetSizeBytes())
		op.OutputBytes += d.GetSizeBytes()
	}
	op.OutputBytes += int64(len(res.GetStdoutRaw()) + len(res.GetStderrRaw()))
	for _, of := range res.GetOutputFiles() {
		op.OutputBytes += of.GetDigest().GetSizeBytes()
		op.addOutput(Output{Path: of.Path, Digest: digestString(of.GetDigest())})
	}
	for _, od := range res.GetOutputDirectories() {
		op.addOutput(Output{Path: od.Path, Digest: digestString(od.GetTreeDigest()), Dir: true})
	}
	for _, l := range res.GetOutputSymlinks() {
		op.addOutput(Output{Path: l.Path, Link: l.Target})
	}
	for _, l := range append(res.GetOutputFileSymlinks(), res.GetOutputDirectorySymlinks()...) {
		op.addOutput(Output{Path: l.Path, Link: l.Target})
	}
	sort.Slice(op.Outputs, func(i, j int) bool { return op.Outputs[i].Path < op.Outputs[j].Path })
	if !op.Cached {
		for _, a := range md.GetAuxiliaryMetadata() {
			var u workerpb.ResourceUsage
			if a.MessageIs(&u) && a.UnmarshalTo(&u) == nil {
				op.CPU += time.Duration(u.UserCpuMicros+u.SystemCpuMicros) * time.Microsecond
				op.InputFiles += u.InputFiles
				op.InputBytes += u.InputBytes
			}
		}
	}
	for _, r := range f.Retries {
		op.Retries = append(op.Retries, Retry{At: r.At, Worker: r.Worker, Kind: r.Kind, Reason: r.Reason})
	}
	op.Expected = f.Expected.Round(time.Millisecond)
	op.Label = label(op, f.Command)
	return op
}

func (o *Operation) addOutput(out Output) {
	if len(o.Outputs) < maxOutputs {
		o.Outputs = append(o.Outputs, out)
	}
}

// label is the target and mnemonic the client sent, else the program's
// name and the first output the command declares ("gcc → foo.o"), else
// the action digest's hash, shortened.
func label(op Operation, cmd *repb.Command) string {
	switch {
	case op.Target != "" && op.Mnemonic != "":
		return op.Target + " (" + op.Mnemonic + ")"
	case op.Target != "":
		return op.Target
	}
	if cmd != nil && len(cmd.Arguments) > 0 {
		l := path.Base(cmd.Arguments[0])
		var outs []string
		outs = append(append(append(outs, cmd.OutputPaths...), cmd.OutputFiles...), cmd.OutputDirectories...)
		if len(outs) > 0 {
			l += " → " + outs[0]
		}
		if op.Mnemonic != "" {
			l = op.Mnemonic + ": " + l
		}
		return l
	}
	if op.Mnemonic != "" {
		return op.Mnemonic
	}
	h, _, _ := strings.Cut(op.Action, "/")
	if len(h) > 12 {
		h = h[:12]
	}
	return "action " + h
}
