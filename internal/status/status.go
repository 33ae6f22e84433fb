// Package status serves Gantry's operator status pages on the HTTP port:
// an overview (queues, quotas, cohorts, workers and what they run), the
// invocation trie, one operation's page and recent failures, with POST
// forms for the admin controls. Pages are rendered on the server with
// html/template, need no external assets and work without JavaScript.
package status

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/asset"
	"github.com/gantry-build/gantry/internal/auth"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/history"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// PageSize is how many rows a list shows per page unless ?per= asks for
// another number (at most MaxPageSize).
const (
	PageSize    = 50
	MaxPageSize = 500
)

// maxProtoBlob bounds the Action and Command blobs read for a page.
const maxProtoBlob = 4 << 20

// Options configure the pages.
type Options struct {
	// Refresh is the meta refresh interval of the list pages; 0 is off.
	Refresh time.Duration
	Logger  *slog.Logger
	// Downloads are the Remote Asset API's recent failed fetches, listed
	// on the failures page (nil: none served here).
	Downloads *asset.FailureLog
	// Live is the output of running actions (liveoutput.go); nil: none
	// is held here.
	Live LiveOutput
	// Shapes is the scheduler's duration history (shapes.go); nil: none
	// is kept here.
	Shapes *scheduler.ShapeHistory
	// SizeClasses are the scheduler's size classes (nil: off): the
	// shapes page says which class each shape runs on.
	SizeClasses *scheduler.SizeClasses
}

// Handler serves the status pages.
type Handler struct {
	sched scheduler.Snapshot
	admin *execution.AdminService
	cas   blobstore.Store
	hist  *history.Recorder
	keys  func() []string
	// policy is the policy in force, or nil.
	policy func() *auth.Policy
	opts   Options
	token  string
	mux    *http.ServeMux
}

// New returns the status pages of a server. hist is the history of
// finished operations and builds (nil: none kept). keys names the
// invocation key levels. policy returns the policy in force, which authorizes the
// controls and downloads of the caller the request's context names
// (auth.FromContext): a control needs the admin permission (on the
// operation's instance for a kill, on every instance for the others), a
// download cas.read on the instance it is read under. A nil policy
// allows everything: the HTTP port without auth.http_require_token
// knows no caller.
func New(sched scheduler.Snapshot, admin *execution.AdminService, cas blobstore.Store, hist *history.Recorder, keys func() []string, policy func() *auth.Policy, opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b := make([]byte, 16)
	rand.Read(b)
	h := &Handler{sched: sched, admin: admin, cas: cas, hist: hist, keys: keys, policy: policy, opts: opts, token: hex.EncodeToString(b), mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /status", h.overview)
	h.mux.HandleFunc("GET /status/{$}", h.overview)
	h.mux.HandleFunc("GET /status/invocations", h.builds)
	h.mux.HandleFunc("GET /status/fairness", h.fairness)
	h.mux.HandleFunc("GET /status/operation", h.operation)
	h.mux.HandleFunc("GET /status/output", h.output)
	h.mux.HandleFunc("GET /status/failures", h.failures)
	h.mux.HandleFunc("GET /status/shapes", h.shapes)
	h.mux.HandleFunc("GET /status/autoscaling", h.autoscaling)
	h.mux.HandleFunc("GET /status/builds", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/status/invocations", http.StatusMovedPermanently)
	})
	h.mux.HandleFunc("GET /status/build", h.build)
	h.mux.HandleFunc("GET /status/charts", h.chartsPage)
	h.mux.HandleFunc("GET /status/chart.svg", h.chartSVG)
	h.mux.HandleFunc("GET /status/blob", h.blob)
	h.mux.HandleFunc("POST /status/worker", h.post(h.workerControl))
	h.mux.HandleFunc("POST /status/kill", h.post(h.kill))
	h.mux.HandleFunc("POST /status/reload", h.post(h.reload))
	return h
}

// ServeHTTP implements http.Handler for /status and below.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// WantsHTML reports whether a request for /status/invocations or
// /status/fairness comes from a browser (the fairness trie's text and JSON
// forms stay for scripts at both).
func WantsHTML(r *http.Request) bool {
	f := r.URL.Query().Get("format")
	return f == "html" || (f == "" && strings.Contains(r.Header.Get("Accept"), "text/html"))
}

// page reads ?page= (from 1) and ?per= into an offset and a limit.
type page struct {
	Num, Per, Total int
	param           string
	base            url.Values
	path            string
}

func readPage(r *http.Request, param string) page {
	q := r.URL.Query()
	p := page{Num: 1, Per: PageSize, param: param, base: q, path: r.URL.Path}
	if n, err := strconv.Atoi(q.Get(param)); err == nil && n > 0 {
		p.Num = n
	}
	if n, err := strconv.Atoi(q.Get("per")); err == nil && n > 0 {
		p.Per = min(n, MaxPageSize)
	}
	return p
}

func (p page) Offset() int { return (p.Num - 1) * p.Per }

// Pages is the number of pages (at least 1).
func (p page) Pages() int { return max(1, (p.Total+p.Per-1)/p.Per) }

func (p page) link(n int) string {
	q := url.Values{}
	for k, v := range p.base {
		q[k] = v
	}
	q.Set(p.param, strconv.Itoa(n))
	return p.path + "?" + q.Encode()
}

// Prev and Next are links to the neighbouring pages, "" at the ends.
func (p page) Prev() string {
	if p.Num <= 1 {
		return ""
	}
	return p.link(p.Num - 1)
}

func (p page) Next() string {
	if p.Num >= p.Pages() {
		return ""
	}
	return p.link(p.Num + 1)
}

// frame is what every page's layout needs.
type frame struct {
	Title   string
	Refresh int
	Token   string
	Now     time.Time
	Flash   string
	// Session: the viewer logged in with the login form (Login); the
	// pages offer a logout button.
	Session bool
	// LogoutToken is what the logout button's form carries (LogoutToken).
	LogoutToken string
	h           *Handler
	r           *http.Request
}

func (h *Handler) frame(r *http.Request, title string, refresh bool) frame {
	f := frame{Title: title, Token: h.token, Now: time.Now(), Flash: r.URL.Query().Get("flash"), Session: auth.ViaSession(r.Context()), h: h, r: r}
	if c, err := r.Cookie(auth.SessionCookie); err == nil && f.Session {
		f.LogoutToken = LogoutToken(c.Value)
	}
	if refresh && h.opts.Refresh > 0 && r.URL.Query().Get("refresh") != "0" {
		f.Refresh = max(1, int(h.opts.Refresh/time.Second))
	}
	return f
}

// Admin reports whether the viewer may use the worker controls and
// reload (admin on every instance); the pages show those buttons only
// then.
func (f frame) Admin() bool {
	return f.h == nil || f.h.authorize(f.r, auth.PermAdmin, scope{global: true}) == nil
}

// AdminOn reports whether the viewer may kill an operation of instance.
func (f frame) AdminOn(instance string) bool {
	return f.h == nil || f.h.authorize(f.r, auth.PermAdmin, scope{instance: instance}) == nil
}

// scope is where a permission is needed.
type scope struct {
	instance string
	// global: on every instance (a rule with instances: ["*"]).
	global bool
	// anywhere: on some instance (the target is unknown).
	anywhere bool
	// what is said after the instance in a denial.
	what string
}

// denial is a control or download the caller may not use (403).
type denial struct{ msg string }

func (d *denial) Error() string { return d.msg }

// authorize checks that the caller of r holds need in sc, and says what
// is missing as the gRPC PERMISSION_DENIED does.
func (h *Handler) authorize(r *http.Request, need auth.Perm, sc scope) error {
	if h.policy == nil {
		return nil
	}
	p, id := h.policy(), auth.FromContext(r.Context())
	if p != nil && id != nil {
		switch {
		case sc.global && p.Allowed(id, need, "", true),
			sc.anywhere && p.AllowedAnywhere(id, need),
			!sc.global && !sc.anywhere && p.Allowed(id, need, sc.instance, false):
			return nil
		}
	}
	where := fmt.Sprintf("instance %q", sc.instance) + sc.what
	switch {
	case sc.global:
		where = `every instance (a rule with instances: ["*"])`
	case sc.anywhere:
		where = "any instance"
	}
	return &denial{fmt.Sprintf("%s lacks permission %s on %s for %s %s; ask the server's administrator to grant it in auth.policy", id, need, where, r.Method, r.URL.Path)}
}

func (h *Handler) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := templates.ExecuteTemplate(w, name, data); err != nil {
		h.opts.Logger.Warn("rendering a status page failed", "page", name, "err", err)
	}
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	w.WriteHeader(code)
	h.render(w, "error", struct {
		frame
		Code    int
		Message string
	}{h.frame(r, http.StatusText(code), false), code, msg})
}

// overview is the main page.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	wp := readPage(r, "wpage")
	op := readPage(r, "opage")
	workers := h.sched.Workers()
	wp.Total = len(workers)
	shown := workers[min(wp.Offset(), len(workers)):min(wp.Offset()+wp.Per, len(workers))]
	ops, total := h.sched.Operations(op.Offset(), op.Per)
	op.Total = total
	quotas, _ := h.admin.ListQuotas(r.Context(), &adminpb.ListQuotasRequest{})
	st := h.sched.Stats()
	_, failed := h.sched.Failures(0, 0)
	type cohort struct {
		Name  string
		Slots int64
	}
	var cohorts []cohort
	for name, n := range quotas.GetCohortSlots() {
		cohorts = append(cohorts, cohort{name, n})
	}
	sortBy(cohorts, func(c cohort) string { return c.Name })
	h.render(w, "overview", struct {
		frame
		Stats      scheduler.Stats
		Failed     int
		Queues     []scheduler.QueuedCount
		Quotas     *adminpb.ListQuotasResponse
		Cohorts    []cohort
		Workers    []scheduler.WorkerStatus
		WorkerPage page
		Ops        []scheduler.OperationInfo
		OpPage     page
	}{h.frame(r, "Gantry status", true), st, failed, h.sched.QueueCounts(), quotas, cohorts, shown, wp, ops, op})
}

// invocation is one row of the trie page.
type invocation struct {
	scheduler.InvocationStats
	Depth int
	Key   string
	// Share is the subtree's part of its parent's executing actions, in
	// percent; FairShare what an even split among siblings with work
	// would give.
	Share, FairShare float64
}

// fairness shows the fairness trie: every invocation's queued and
// executing actions and its share.
func (h *Handler) fairness(w http.ResponseWriter, r *http.Request) {
	stats := h.sched.Invocations()
	rows := make([]invocation, len(stats))
	parentExec := map[string]int{}
	siblings := map[string]int{}
	for _, st := range stats {
		parentExec[pathKey(st.Path)] = st.Executing
		if len(st.Path) > 0 && st.Queued+st.Executing > 0 {
			siblings[pathKey(st.Path[:len(st.Path)-1])]++
		}
	}
	for i, st := range stats {
		rows[i] = invocation{InvocationStats: st, Depth: len(st.Path)}
		if len(st.Path) == 0 {
			rows[i].Key = "(all)"
			rows[i].Share, rows[i].FairShare = 100, 100
			continue
		}
		rows[i].Key = st.Path[len(st.Path)-1]
		if rows[i].Key == "" {
			rows[i].Key = "(none)"
		}
		parent := pathKey(st.Path[:len(st.Path)-1])
		if pe := parentExec[parent]; pe > 0 {
			rows[i].Share = 100 * float64(st.Executing) / float64(pe)
		}
		if n := siblings[parent]; n > 0 && st.Queued+st.Executing > 0 {
			rows[i].FairShare = 100 / float64(n)
		}
	}
	p := readPage(r, "page")
	p.Total = len(rows)
	var keys []string
	if h.keys != nil {
		keys = h.keys()
	}
	h.render(w, "fairness", struct {
		frame
		Keys []string
		Rows []invocation
		Page page
	}{h.frame(r, "Fairness", true), keys, rows[min(p.Offset(), len(rows)):min(p.Offset()+p.Per, len(rows))], p})
}

// pathKey is a map key for an invocation path ("" keys are common).
func pathKey(p []string) string {
	return strconv.Itoa(len(p)) + "\x00" + strings.Join(p, "\x00")
}

func (h *Handler) failures(w http.ResponseWriter, r *http.Request) {
	p := readPage(r, "page")
	fs, total := h.sched.Failures(p.Offset(), p.Per)
	p.Total = total
	var downloads []asset.Failure
	if h.opts.Downloads != nil {
		downloads = h.opts.Downloads.Recent()
	}
	h.render(w, "failures", struct {
		frame
		Failures  []scheduler.FailedOperation
		Page      page
		Downloads []asset.Failure
		Served    bool
	}{h.frame(r, "Recent failures", true), fs, p, downloads, h.opts.Downloads != nil})
}

// stamp is one step of an operation's timeline.
type stamp struct {
	What string
	At   time.Time
}

// output is a downloadable output of the result.
type output struct {
	Name   string
	Digest digest.Digest
	Inline string
	Link   string
	// Head and Tail are the start and end of stdout or stderr read from
	// the CAS (streamPeek bytes each), Omitted what lies between.
	Head, Tail string
	Omitted    int64
}

// streamPeek is how much of the start and of the end of stdout and
// stderr an operation's page shows.
const streamPeek = 64 << 10

// peek reads the start and the end of the blob d for the page.
func (h *Handler) peek(ctx context.Context, d digest.Digest) (head, tail string, omitted int64, err error) {
	read := func(off, n int64) (string, error) {
		rc, err := h.cas.Open(ctx, d, off)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		b, err := io.ReadAll(io.LimitReader(rc, n))
		return string(b), err
	}
	if d.Size <= 2*streamPeek {
		head, err = read(0, d.Size)
		return head, "", 0, err
	}
	if head, err = read(0, streamPeek); err != nil {
		return "", "", 0, err
	}
	tail, err = read(d.Size-streamPeek, streamPeek)
	return head, tail, d.Size - 2*streamPeek, err
}

// operation serves an operation's page: its action and command, its
// timeline, its result and outputs, and while it is queued why it still
// waits.
func (h *Handler) operation(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" {
		h.fail(w, r, http.StatusBadRequest, "no operation given: open /status/operation?name=OPERATION (the overview and the failures page link to operations)")
		return
	}
	info, err := h.sched.Operation(name)
	if err != nil {
		var ok bool
		if info, ok = h.pastOperation(name); !ok {
			h.fail(w, r, http.StatusNotFound, fmt.Sprintf("operation %q is not known: it never existed, or it finished longer ago than scheduler.retention and is not (or no longer) in the history (status.history)", name))
			return
		}
	}
	// The page shows the action's command line, environment and outputs,
	// read from the CAS: the viewer needs cas.read on its instance, as
	// for the downloads it links to.
	if err := h.authorize(r, auth.PermCASRead, scope{instance: info.Instance, what: fmt.Sprintf(" (operation %q)", name)}); err != nil {
		h.fail(w, r, http.StatusForbidden, err.Error())
		return
	}
	h.expectedFromHistory(&info)
	page := operationPage{frame: h.frame(r, "Operation "+name, !info.Done), Op: info, Timeline: operationTimeline(info)}
	page.Took, page.Ratio = tookVsExpected(info)
	page.Action, page.Command, page.Problems = h.actionAndCommand(r.Context(), info)
	if info.Response != nil {
		page.Result = info.Response.Result
		var streamProblems []string
		page.Outputs, streamProblems = h.resultOutputs(r.Context(), info.ActionDigest.Function, info.Instance, page.Result)
		page.Problems = append(page.Problems, streamProblems...)
		st := status.FromProto(info.Response.Status)
		page.Code, page.Message = st.Code().String(), st.Message()
	}
	page.Stages, page.Total = finishedStages(info)
	if !info.Done {
		if a, err := h.sched.WhyQueued(name); err == nil {
			page.Why = &a
		}
	}
	page.Input = inputRootOf(page.Result)
	page.Live = h.liveView(r, info)
	h.render(w, "operation", page)
}

// operationPage is what the operation page's template shows.
type operationPage struct {
	frame
	Op       scheduler.OperationInfo
	Action   *repb.Action
	Command  *repb.Command
	Problems []string
	Timeline []stamp
	Result   *repb.ActionResult
	Code     string
	Message  string
	Outputs  []output
	Why      *scheduler.QueuedAnalysis
	Stages   []execution.Stage
	Total    time.Duration
	Input    *inputRoot
	Live     *liveView
	// Took is a finished operation's execution time and Ratio that over
	// its expected time (expected.go).
	Took  time.Duration
	Ratio string
}

// actionAndCommand reads the operation's action and its command from
// the CAS; what could not be read is a problem the page shows, not an
// error.
func (h *Handler) actionAndCommand(ctx context.Context, info scheduler.OperationInfo) (*repb.Action, *repb.Command, []string) {
	var action repb.Action
	var command repb.Command
	var problems []string
	if err := h.readProto(ctx, info.ActionDigest, &action); err != nil {
		problems = append(problems, "action: "+err.Error())
	} else if cd, err := digest.FromProto(info.ActionDigest.Function, action.CommandDigest); err != nil {
		problems = append(problems, "command digest: "+err.Error())
	} else if err := h.readProto(ctx, cd, &command); err != nil {
		problems = append(problems, "command: "+err.Error())
	}
	return &action, &command, problems
}

// operationTimeline is an operation's steps in time: queued, leased,
// the worker's stages as its result's metadata reports them, completed.
func operationTimeline(info scheduler.OperationInfo) []stamp {
	timeline := []stamp{{"queued", info.QueuedAt}}
	if !info.LeasedAt.IsZero() {
		timeline = append(timeline, stamp{"leased to " + info.Worker, info.LeasedAt})
	}
	if md := info.Response.GetResult().GetExecutionMetadata(); md != nil {
		for _, s := range []struct {
			what string
			ts   interface{ AsTime() time.Time }
			ok   bool
		}{
			{"worker started", md.WorkerStartTimestamp, md.WorkerStartTimestamp != nil},
			{"input fetch started", md.InputFetchStartTimestamp, md.InputFetchStartTimestamp != nil},
			{"input fetch completed", md.InputFetchCompletedTimestamp, md.InputFetchCompletedTimestamp != nil},
			{"execution started", md.ExecutionStartTimestamp, md.ExecutionStartTimestamp != nil},
			{"execution completed", md.ExecutionCompletedTimestamp, md.ExecutionCompletedTimestamp != nil},
			{"output upload started", md.OutputUploadStartTimestamp, md.OutputUploadStartTimestamp != nil},
			{"output upload completed", md.OutputUploadCompletedTimestamp, md.OutputUploadCompletedTimestamp != nil},
			{"worker completed", md.WorkerCompletedTimestamp, md.WorkerCompletedTimestamp != nil},
		} {
			if s.ok {
				timeline = append(timeline, stamp{s.what, s.ts.AsTime()})
			}
		}
	}
	if info.Done {
		timeline = append(timeline, stamp{"completed", info.DoneAt})
	}
	return timeline
}

// resultOutputs are a result's stdout and stderr (inline or linked, and
// then their start and end read from the CAS) and its outputs, with what
// could not be read.
func (h *Handler) resultOutputs(ctx context.Context, fn digest.Function, instance string, result *repb.ActionResult) (outs []output, problems []string) {
	addOut := func(n string, raw []byte, d *repb.Digest) {
		if len(raw) > 0 {
			outs = append(outs, output{Name: n, Inline: string(raw)})
		} else if d != nil {
			if dd, err := digest.FromProto(fn, d); err == nil {
				outs = append(outs, output{Name: n, Digest: dd, Link: blobLink(dd, n, instance)})
			}
		}
	}
	addOut("stdout", result.GetStdoutRaw(), result.GetStdoutDigest())
	addOut("stderr", result.GetStderrRaw(), result.GetStderrDigest())
	// The streams are shown inline too, their start and end.
	for i := range outs {
		if o := &outs[i]; o.Link != "" && o.Digest.Size > 0 {
			var err error
			if o.Head, o.Tail, o.Omitted, err = h.peek(ctx, o.Digest); err != nil {
				problems = append(problems, o.Name+": "+err.Error())
			}
		}
	}
	for _, f := range result.GetOutputFiles() {
		addOut(f.Path, f.Contents, f.Digest)
	}
	for _, d := range result.GetOutputDirectories() {
		addOut(d.Path+"/ (Tree)", nil, d.TreeDigest)
	}
	for _, l := range append(append(result.GetOutputSymlinks(), result.GetOutputFileSymlinks()...), result.GetOutputDirectorySymlinks()...) {
		outs = append(outs, output{Name: l.Path + " → " + l.Target, Inline: "(symbolic link)"})
	}
	return outs, problems
}

// finishedStages are a finished operation's stages as the completion line
// cuts them, adding up to the total (clock skew between worker and server
// clamped); none while it runs.
func finishedStages(info scheduler.OperationInfo) ([]execution.Stage, time.Duration) {
	if !info.Done || info.Response == nil {
		return nil, 0
	}
	accepted := info.Accepted
	if accepted.IsZero() {
		accepted = info.QueuedAt
	}
	stages, total, _ := execution.Stages(accepted, info.DoneAt, info.DoneAt, info.Response.GetResult().GetExecutionMetadata())
	return stages, total
}

// blobLink downloads d, read under instance (the operation's: the
// viewer needs cas.read there).
func blobLink(d digest.Digest, name, instance string) string {
	q := url.Values{"hash": {d.Hash}, "size": {strconv.FormatInt(d.Size, 10)}, "fn": {strconv.Itoa(int(d.Function))}, "name": {name}, "instance": {instance}}
	return "/status/blob?" + q.Encode()
}

func (h *Handler) readProto(ctx context.Context, d digest.Digest, m proto.Message) error {
	if d.Size > maxProtoBlob {
		return fmt.Errorf("blob %s is larger than %d bytes; not shown", d, maxProtoBlob)
	}
	rc, err := h.cas.Open(ctx, d, 0)
	if errors.Is(err, blobstore.ErrNotFound) {
		return fmt.Errorf("blob %s is no longer in the CAS", d)
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxProtoBlob+1))
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("blob %s does not decode: %v", d, err)
	}
	return nil
}

// blob downloads a CAS blob (stdout, stderr, output files), read under
// ?instance= as ByteStream Read reads it: the caller needs cas.read on
// that instance.
func (h *Handler) blob(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := h.authorize(r, auth.PermCASRead, scope{instance: q.Get("instance")}); err != nil {
		h.fail(w, r, http.StatusForbidden, err.Error())
		return
	}
	size, err := strconv.ParseInt(q.Get("size"), 10, 64)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "size is not a number; use the links on an operation's page")
		return
	}
	fnum, err := strconv.Atoi(q.Get("fn"))
	if err != nil {
		fnum = int(repb.DigestFunction_SHA256)
	}
	d, err := digest.Parse(digest.Function(fnum), q.Get("hash"), size)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "bad digest: "+err.Error())
		return
	}
	rc, err := h.cas.Open(r.Context(), d, 0)
	if errors.Is(err, blobstore.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("blob %s is not in the CAS (it may have been evicted)", d))
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "reading the CAS: "+err.Error())
		return
	}
	defer rc.Close()
	name := q.Get("name")
	if name == "" {
		name = d.Hash
	}
	name = strings.Map(func(c rune) rune {
		if c == '"' || c == '\\' || c == '/' || c < ' ' || c > '~' {
			return '_'
		}
		return c
	}, name)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Header().Set("Content-Length", strconv.FormatInt(d.Size, 10))
	io.Copy(w, rc)
}

// post guards a control: same origin and the page's token (CSRF), then
// runs f and redirects back with its outcome.
func (h *Handler) post(f func(ctx context.Context, r *http.Request) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h.checkOrigin(r); err != nil {
			h.fail(w, r, http.StatusForbidden, err.Error())
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, "the form does not parse: "+err.Error())
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(h.token)) != 1 {
			h.fail(w, r, http.StatusForbidden, "the form's token is missing or stale (the server restarted?); reload the status page and try again")
			return
		}
		who := "status page from " + r.RemoteAddr
		if id := auth.FromContext(r.Context()); id != nil {
			who += " as " + id.String()
		}
		msg, err := f(execution.WithActor(r.Context(), who), r)
		var d *denial
		if errors.As(err, &d) {
			h.fail(w, r, http.StatusForbidden, d.msg)
			return
		}
		if err != nil {
			msg = "failed: " + status.Convert(err).Message()
		}
		back := r.PostFormValue("back")
		if !strings.HasPrefix(back, "/status") || strings.HasPrefix(back, "//") {
			back = "/status"
		}
		u, _ := url.Parse(back)
		if u == nil {
			u = &url.URL{Path: "/status"}
		}
		q := u.Query()
		q.Set("flash", msg)
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.String(), http.StatusSeeOther)
	}
}

// checkOrigin refuses cross-site form posts (CheckOrigin).
func (h *Handler) checkOrigin(r *http.Request) error { return CheckOrigin(r) }

// CheckOrigin refuses cross-site form posts: browsers send Origin (and
// Sec-Fetch-Site) with them. The login form (Login) uses it too.
func CheckOrigin(r *http.Request) error {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return fmt.Errorf("cross-site request refused (Sec-Fetch-Site: %s); use the buttons of the status page itself", s)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("request from origin %q refused: the status page's controls accept only same-origin posts", o)
		}
	}
	return nil
}

// refuse logs a control refused here, before the admin service, as the
// service logs its own refusals.
func (h *Handler) refuse(ctx context.Context, what string, err error, attrs ...any) error {
	h.admin.LogRefused(ctx, what, err, attrs...)
	return err
}

func (h *Handler) workerControl(ctx context.Context, r *http.Request) (string, error) {
	id, action := r.PostFormValue("worker"), r.PostFormValue("action")
	req := &adminpb.WorkerControlRequest{WorkerId: id, Reason: r.PostFormValue("reason")}
	if err := h.authorize(r, auth.PermAdmin, scope{global: true}); err != nil {
		return "", h.refuse(ctx, action, err, "worker", id, "reason", req.Reason)
	}
	var err error
	switch action {
	case "drain":
		_, err = h.admin.DrainWorker(ctx, req)
	case "undrain":
		_, err = h.admin.UndrainWorker(ctx, req)
	case "terminate":
		_, err = h.admin.TerminateWorker(ctx, req)
	case "pause":
		_, err = h.admin.PauseWorker(ctx, req)
	case "resume":
		_, err = h.admin.ResumeWorker(ctx, req)
	default:
		return "", h.refuse(ctx, action, fmt.Errorf("unknown control %q; use drain, undrain, terminate, pause or resume", action), "worker", id, "reason", req.Reason)
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: %s done", id, action), nil
}

func (h *Handler) kill(ctx context.Context, r *http.Request) (string, error) {
	name, reason := r.PostFormValue("name"), r.PostFormValue("reason")
	// Admin on the operation's instance; for an operation not known,
	// on some instance (the service then says it is not known).
	sc := scope{anywhere: true}
	if info, err := h.sched.Operation(name); err == nil {
		sc = scope{instance: info.Instance, what: fmt.Sprintf(" (operation %q)", name)}
	}
	if err := h.authorize(r, auth.PermAdmin, sc); err != nil {
		return "", h.refuse(ctx, "kill", err, "operation", name, "reason", reason)
	}
	resp, err := h.admin.KillOperation(ctx, &adminpb.KillOperationRequest{Name: name, Reason: reason})
	if err != nil {
		return "", err
	}
	if resp.AlreadyDone {
		return name + " had already finished", nil
	}
	return name + " killed", nil
}

func (h *Handler) reload(ctx context.Context, r *http.Request) (string, error) {
	if err := h.authorize(r, auth.PermAdmin, scope{global: true}); err != nil {
		return "", h.refuse(ctx, "reload", err)
	}
	if _, err := h.admin.ReloadConfig(ctx, &adminpb.ReloadConfigRequest{}); err != nil {
		return "", err
	}
	return "configuration reloaded", nil
}
