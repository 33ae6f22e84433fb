package status

import (
	"fmt"
	"html/template"
	"net/http"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/auth"
	"github.com/gantry-build/gantry/internal/history"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// The builds pages show the history (internal/history): the builds, newest
// first, and one build with its operations. They need the history; without
// one (status.history.max_operations: 0) they say how to turn it on.

// builds lists the builds.
func (h *Handler) builds(w http.ResponseWriter, r *http.Request) {
	if h.hist == nil {
		h.fail(w, r, http.StatusNotFound, "this server keeps no history of builds: set status.history.max_operations above 0")
		return
	}
	p := readPage(r, "page")
	bs, total := h.hist.Builds(p.Offset(), p.Per)
	p.Total = total
	counts := h.inProgress()
	h.render(w, "builds", struct {
		frame
		Builds     []history.Build
		InProgress map[string]int
		Known      bool
		Page       page
	}{h.frame(r, "Invocations", true), bs, counts, counts != nil, p})
}

// inProgress counts the queued and executing operations of each build,
// from the fairness trie: known only when tool_invocation_id is one of
// its levels (scheduler.fairness.keys; it is by default). nil otherwise.
func (h *Handler) inProgress() map[string]int {
	level := -1
	for i, k := range h.keys() {
		if k == "tool_invocation_id" {
			level = i
		}
	}
	if level < 0 {
		return nil
	}
	out := map[string]int{}
	for _, st := range h.sched.Invocations() {
		if len(st.Path) == level+1 && st.Path[level] != "" {
			out[st.Path[level]] += st.Queued + st.Executing
		}
	}
	return out
}

// build shows one build and its operations.
func (h *Handler) build(w http.ResponseWriter, r *http.Request) {
	if h.hist == nil {
		h.fail(w, r, http.StatusNotFound, "this server keeps no history of builds: set status.history.max_operations above 0")
		return
	}
	id := r.URL.Query().Get("id")
	b, ok := h.hist.Build(id)
	if !ok {
		h.fail(w, r, http.StatusNotFound, "no build "+id+" in the history: it may have fallen out (status.history), or its client sent no tool_invocation_id; the builds page lists those kept")
		return
	}
	// Its operations' labels name targets and outputs: the viewer needs
	// cas.read on the build's instance, as for an operation's page.
	if err := h.authorize(r, auth.PermCASRead, scope{instance: b.Instance, what: fmt.Sprintf(" (build %q)", id)}); err != nil {
		h.fail(w, r, http.StatusForbidden, err.Error())
		return
	}
	p := readPage(r, "page")
	ops, total := h.hist.Operations(id, p.Offset(), p.Per)
	p.Total = total
	counts := h.inProgress()
	h.render(w, "build", struct {
		frame
		Build      history.Build
		InProgress int
		Known      bool
		Operations []history.Operation
		Page       page
	}{h.frame(r, "Build "+id, true), b, counts[id], counts != nil, ops, p})
}

// pastOperation is the operation page's view of a finished operation
// the scheduler no longer knows (after its retention, or a restart), from
// the history.
func (h *Handler) pastOperation(name string) (scheduler.OperationInfo, bool) {
	if h.hist == nil {
		return scheduler.OperationInfo{}, false
	}
	o, ok := h.hist.Operation(name)
	if !ok {
		return scheduler.OperationInfo{}, false
	}
	ad, err := o.ActionDigest()
	if err != nil {
		return scheduler.OperationInfo{}, false
	}
	ts := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	md := &repb.ExecutedActionMetadata{
		Worker: o.Worker, WorkerStartTimestamp: ts(o.WorkerStart), WorkerCompletedTimestamp: ts(o.WorkerEnd),
		InputFetchStartTimestamp: ts(o.FetchStart), InputFetchCompletedTimestamp: ts(o.FetchEnd),
		ExecutionStartTimestamp: ts(o.ExecStart), ExecutionCompletedTimestamp: ts(o.ExecEnd),
		OutputUploadStartTimestamp: ts(o.UploadStart), OutputUploadCompletedTimestamp: ts(o.UploadEnd),
	}
	if o.InputFiles > 0 || o.InputBytes > 0 {
		if u, err := anypb.New(&workerpb.ResourceUsage{InputFiles: o.InputFiles, InputBytes: o.InputBytes}); err == nil {
			md.AuxiliaryMetadata = append(md.AuxiliaryMetadata, u)
		}
	}
	res := &repb.ActionResult{ExitCode: o.ExitCode, ExecutionMetadata: md}
	proto := func(s string) *repb.Digest {
		d, err := history.ParseDigest(ad.Function, s)
		if err != nil {
			return nil
		}
		return d.Proto()
	}
	res.StdoutDigest, res.StderrDigest = proto(o.Stdout), proto(o.Stderr)
	for _, out := range o.Outputs {
		switch {
		case out.Link != "":
			res.OutputSymlinks = append(res.OutputSymlinks, &repb.OutputSymlink{Path: out.Path, Target: out.Link})
		case out.Dir:
			res.OutputDirectories = append(res.OutputDirectories, &repb.OutputDirectory{Path: out.Path, TreeDigest: proto(out.Digest)})
		default:
			res.OutputFiles = append(res.OutputFiles, &repb.OutputFile{Path: out.Path, Digest: proto(out.Digest)})
		}
	}
	info := scheduler.OperationInfo{
		OperationState: scheduler.OperationState{Name: o.Name, Instance: o.Instance, ActionDigest: ad, Stage: repb.ExecutionStage_COMPLETED, Done: true, Accepted: o.Accepted,
			Response: &repb.ExecuteResponse{Result: res, CachedResult: o.Cached, Status: status.New(o.Code, o.Message).Proto()}},
		Queue: o.Queue, Worker: o.Worker, QueuedAt: o.Accepted, DoneAt: o.Finished, Invocation: o.Invocation,
	}
	for _, x := range o.Retries {
		info.Retries = append(info.Retries, scheduler.Retry{At: x.At, Worker: x.Worker, Kind: scheduler.RetryKind(x.Kind), Reason: x.Reason})
	}
	return info, true
}

var buildFuncs = template.FuncMap{
	"dur": func(d time.Duration) string {
		switch {
		case d <= 0:
			return "-"
		case d < time.Second:
			return d.Round(100 * time.Microsecond).String()
		}
		return d.Round(100 * time.Millisecond).String()
	},
	"day": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"total": func(o history.Operation) time.Duration {
		if o.Accepted.IsZero() {
			return 0
		}
		return o.Finished.Sub(o.Accepted)
	},
}

func init() {
	template.Must(templates.Funcs(buildFuncs).Parse(`
{{define "builds"}}{{template "head" .}}
<p>Builds: the operations sharing a client's tool_invocation_id (Bazel's --invocation_id, new for every command; each gantry run, cc and batch command, named by its command line), newest first, kept durably (status.history). How the workers are shared between invocations right now: <a href="/status/fairness">fairness</a>.</p>
<table id="builds"><tr><th>Build</th><th>Tool</th><th>Instance</th><th>Started (UTC)</th><th>Duration</th><th>Executed</th><th>Cache hits</th><th>Failed</th><th>In progress</th><th>Queue p50</th><th>Queue p95</th><th>Output</th><th>Up</th><th>Down</th></tr>
{{$f := .}}{{range .Builds}}<tr><td>{{if .Name}}<a href="/status/build?id={{.ID}}" title="{{.Name}}">{{truncate .Name 60}}</a><br><span class="muted">{{truncate .ID 40}}</span>{{else}}<a href="/status/build?id={{.ID}}">{{truncate .ID 40}}</a>{{end}}{{with .Correlated}}<br><span class="muted">{{truncate . 40}}</span>{{end}}</td><td>{{.Tool}} {{.ToolVersion}}</td><td>{{or .Instance "(default)"}}</td><td>{{day .First}}</td><td>{{dur .Duration}}</td><td class="n">{{.Executed}}</td><td class="n">{{.CacheHits}}</td><td class="n">{{.Failed}}</td><td class="n">{{if $f.Known}}{{index $f.InProgress .ID}}{{else}}-{{end}}</td><td class="n">{{dur (.QueueQuantile 0.5)}}</td><td class="n">{{dur (.QueueQuantile 0.95)}}</td><td class="n">{{bytes .OutputBytes}}</td><td class="n">{{bytes .BytesUp}}</td><td class="n">{{bytes .BytesDown}}</td></tr>
{{else}}<tr><td colspan="14" class="muted">no builds yet</td></tr>{{end}}</table>
{{template "pager" .Page}}
{{template "foot" .}}{{end}}

{{define "build"}}{{template "head" .}}
{{with .Build}}<table id="summary">
{{with .Name}}<tr><th>Command</th><td>{{.}}</td></tr>{{end}}
<tr><th>Tool</th><td>{{.Tool}} {{.ToolVersion}}</td></tr>
<tr><th>Instance</th><td>{{or .Instance "(default)"}}</td></tr>
{{with .Correlated}}<tr><th>Correlated id</th><td>{{.}}</td></tr>{{end}}
<tr><th>Started (UTC)</th><td>{{day .First}}</td></tr>
<tr><th>Duration</th><td>{{dur .Duration}}</td></tr>
<tr><th>Executed</th><td>{{.Executed}}</td></tr>
<tr><th>Cache hits</th><td>{{.CacheHits}}</td></tr>
<tr><th>Failed</th><td>{{.Failed}}</td></tr>
<tr><th>In progress</th><td>{{if $.Known}}{{$.InProgress}}{{else}}unknown (tool_invocation_id is not a level of scheduler.fairness.keys){{end}}</td></tr>
<tr><th>Queue time</th><td>p50 {{dur (.QueueQuantile 0.5)}}, p95 {{dur (.QueueQuantile 0.95)}} (upper bounds)</td></tr>
<tr><th>Output</th><td>{{bytes .OutputBytes}}</td></tr>
<tr><th>Uploaded</th><td id="bytes-up" title="{{.BytesUp}} bytes">{{bytes .BytesUp}} <span class="muted">(to the CAS: ByteStream and batch uploads)</span></td></tr>
<tr><th>Downloaded</th><td id="bytes-down" title="{{.BytesDown}} bytes">{{bytes .BytesDown}} <span class="muted">(from the CAS and inlined in cached results)</span></td></tr>
<tr><th>CPU time</th><td>{{dur .CPU}} <span class="muted">(of the executed actions, as Gantry workers report it)</span></td></tr>
</table>{{end}}
<h2>Operations</h2>
<table id="build-operations"><tr><th>Action</th><th>Finished (UTC)</th><th>Result</th><th>Worker</th><th>Queued</th><th>Total</th></tr>
{{range .Operations}}<tr><td><a href="/status/operation?name={{.Name}}">{{truncate .Label 80}}</a></td><td>{{when .Finished}}</td><td>{{if .Cached}}cache hit{{else if ne .Code 0}}{{.Code}}{{else if .ExitCode}}exit {{.ExitCode}}{{else}}ok{{end}}</td><td>{{.Worker}}</td><td class="n">{{dur .QueueTime}}</td><td class="n">{{dur (total .)}}</td></tr>
{{else}}<tr><td colspan="6" class="muted">none kept</td></tr>{{end}}</table>
{{template "pager" .Page}}
{{template "foot" .}}{{end}}
`))
}
