package status

import (
	"cmp"
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gantry-build/gantry/internal/scheduler"
)

func sortBy[T any](xs []T, key func(T) string) {
	sort.Slice(xs, func(i, j int) bool { return key(xs[i]) < key(xs[j]) })
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("15:04:05.000")
	},
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return now.Sub(t).Round(100 * time.Millisecond).String()
	},
	"since": func(a, b time.Time) string {
		if a.IsZero() || b.IsZero() {
			return ""
		}
		return "+" + b.Sub(a).Round(time.Millisecond).String()
	},
	"bytes": func(n int64) string {
		switch {
		case n >= 1<<30:
			return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
	"join": strings.Join,
	// path shows an invocation path as the invocations page does: an
	// empty key is "(none)".
	"path": func(p []string) string {
		out := make([]string, len(p))
		for i, k := range p {
			out[i] = cmp.Or(k, "(none)")
		}
		return strings.Join(out, " › ")
	},
	"pct":    func(f float64) string { return fmt.Sprintf("%.0f%%", f) },
	"indent": func(d int) string { return strings.Repeat("\u00a0\u00a0\u00a0", d) },
	"quota": func(n int64) string {
		if n < 0 {
			return "none"
		}
		return fmt.Sprint(n)
	},
	"resources": func(total, held map[string]int64) string {
		var parts []string
		for k, v := range total {
			parts = append(parts, fmt.Sprintf("%s %d/%d", k, held[k], v))
		}
		sort.Strings(parts)
		return strings.Join(parts, ", ")
	},
	"state": func(w scheduler.WorkerStatus) string { return w.State() },
	"truncate": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		for n > 0 && !utf8.RuneStart(s[n]) {
			n-- // not inside a character
		}
		return s[:n] + "…"
	},
}

var templates = template.Must(template.New("").Funcs(funcs).Parse(`
{{define "head"}}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{{.Title}} · Gantry</title>
{{if .Refresh}}<meta http-equiv="refresh" content="{{.Refresh}}">{{end}}
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#234;color:#fff;padding:.5em 1em}
header a{color:#cde;margin-right:1.2em;text-decoration:none}
header a:hover{text-decoration:underline}
main{padding:0 1em 2em}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;background:#fff;margin:.3em 0}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#eef}
td.n{text-align:right}
.flash{background:#ffd;border:1px solid #cc8;padding:.4em;margin:.5em 0}
.st-active{color:#070}.st-draining,.st-terminating{color:#a60}.st-drained{color:#666}.st-paused{color:#00a}.st-reconnecting{color:#a00}
form.inline{display:inline;margin:0}
button{font-size:12px;margin:1px}
pre{background:#fff;border:1px solid #ccc;padding:.4em;overflow:auto;max-height:30em}
.muted{color:#777}
.pager a{margin:0 .5em}
</style></head><body>
<header><strong>Gantry</strong> &nbsp;
<a href="/status">Overview</a><a href="/status/invocations">Builds</a><a href="/status/charts">Charts</a><a href="/status/fairness">Fairness</a><a href="/status/failures">Failures</a><a href="/metrics">Metrics</a>
<span class="muted" style="color:#9ab">{{when .Now}} UTC{{if .Refresh}} · refreshes every {{.Refresh}}s{{end}}</span>
{{if .Session}}<form class="inline" method="post" action="/logout" style="float:right"><input type="hidden" name="logout_token" value="{{.LogoutToken}}"><button id="logout">Log out</button></form>{{end}}</header>
<main><h1>{{.Title}}</h1>
{{if .Flash}}<p class="flash" role="status">{{.Flash}}</p>{{end}}
{{end}}

{{define "foot"}}</main></body></html>{{end}}

{{define "pager"}}{{if gt .Pages 1}}<p class="pager">Page {{.Num}} of {{.Pages}} ({{.Total}} in all)
{{with .Prev}}<a href="{{.}}">← previous</a>{{end}}{{with .Next}}<a href="{{.}}">next →</a>{{end}}</p>{{end}}{{end}}

{{define "error"}}{{template "head" .}}<p>{{.Message}}</p><p><a href="/status">Back to the overview</a></p>{{template "foot" .}}{{end}}

{{define "overview"}}{{template "head" .}}
<p id="counts">{{.Stats.Queued}} queued · {{.Stats.Held}} held · {{.Stats.Executing}} executing · {{.Stats.Workers}} workers · {{.Stats.Operations}} operations known · {{.Stats.Preemptions}} pre-emptions{{if .Stats.Suspended}} ({{.Stats.Suspended}} suspended){{end}} · <a href="/status/failures">{{.Failed}} recent failures</a></p>

<h2>Queues</h2>
<table><tr><th>Queue</th><th>Instance</th><th>Queued</th></tr>
{{range .Queues}}<tr><td>{{.Queue}}</td><td>{{or .Instance "(default)"}}</td><td class="n">{{.Queued}}</td></tr>
{{else}}<tr><td colspan="3" class="muted">nothing queued</td></tr>{{end}}</table>

<h2>Cohorts and quotas</h2>
{{if .Cohorts}}<table><tr><th>Cohort</th><th>Slots</th></tr>
{{range .Cohorts}}<tr><td>{{.Name}}</td><td class="n">{{.Slots}}</td></tr>{{end}}</table>{{else}}<p class="muted">No cohorts configured.</p>{{end}}
{{with .Quotas}}{{if .Quotas}}<table><tr><th>Instance</th><th>Cohort</th><th>Min</th><th>Max</th><th>Usage</th><th>Queued</th><th>Configured</th></tr>
{{range .Quotas}}<tr><td>{{.InstanceName}}</td><td>{{.Cohort}}</td><td class="n">{{.MinQuota}}</td><td class="n">{{quota .MaxQuota}}</td><td class="n">{{.Usage}}</td><td class="n">{{.Queued}}</td><td>{{if .Configured}}yes{{else}}no{{end}}</td></tr>{{end}}</table>
{{range .Warnings}}<p class="flash">{{.}}</p>{{end}}{{else}}<p class="muted">No quotas set.</p>{{end}}{{end}}

<h2>Workers</h2>
<table id="workers"><tr><th>Worker</th><th>State</th><th>Cores</th><th>Slots</th><th>Memory</th><th>Resources (held/total)</th><th>Cohort</th><th>Last seen</th><th title="leased, not started: fetching inputs or waiting for a free core">Held</th><th>Executing</th><th>Running</th><th>Controls</th></tr>
{{$f := .}}{{range .Workers}}<tr data-worker="{{.Info.ID}}"><td>{{.Info.ID}}{{with .Info.Version}}<br><span class="muted">{{.}}</span>{{end}}</td>
<td class="st-{{state .}}">{{state .}}</td><td class="n">{{.Info.Platform.Cores}}</td><td class="n">{{.Info.Slots}}</td><td class="n">{{bytes .Info.Platform.MemoryBytes}}</td>
<td>{{resources .Info.Platform.Resources .Held}}</td><td>{{.Cohort}}</td><td>{{ago $f.Now .LastSeen}} ago</td>
{{with .Counts}}<td class="n held">{{.Held}}</td><td class="n executing">{{.Executing}}</td>{{end}}
<td>{{range .Leases}}<div>{{range .Operations}}<a href="/status/operation?name={{.}}">{{truncate . 24}}</a> {{end}}<span class="muted">{{if .Executing}}executing{{else}}held (not started){{end}}, leased {{ago $f.Now .Started}} ago</span></div>{{else}}<span class="muted">idle</span>{{end}}</td>
<td>{{$id := .Info.ID}}{{if $f.Admin}}
{{if .Control.Drain}}<form class="inline" method="post" action="/status/worker"><input type="hidden" name="csrf" value="{{$f.Token}}"><input type="hidden" name="worker" value="{{$id}}"><button name="action" value="undrain">Undrain</button></form>
{{else}}<form class="inline" method="post" action="/status/worker"><input type="hidden" name="csrf" value="{{$f.Token}}"><input type="hidden" name="worker" value="{{$id}}"><button name="action" value="drain">Drain</button></form>{{end}}
{{if not .Control.Terminate}}<form class="inline" method="post" action="/status/worker"><input type="hidden" name="csrf" value="{{$f.Token}}"><input type="hidden" name="worker" value="{{$id}}"><button name="action" value="terminate">Terminate</button></form>{{end}}
{{if .Control.Pause}}<form class="inline" method="post" action="/status/worker"><input type="hidden" name="csrf" value="{{$f.Token}}"><input type="hidden" name="worker" value="{{$id}}"><button name="action" value="resume">Resume</button></form>
{{else}}<form class="inline" method="post" action="/status/worker"><input type="hidden" name="csrf" value="{{$f.Token}}"><input type="hidden" name="worker" value="{{$id}}"><button name="action" value="pause">Pause</button></form>{{end}}
{{else}}<span class="muted" title="the controls need the admin permission on every instance">admin only</span>{{end}}</td></tr>
{{else}}<tr><td colspan="12" class="muted">no workers registered</td></tr>{{end}}</table>
{{template "pager" .WorkerPage}}

<h2>Operations in progress</h2>
<table id="operations"><tr><th>Operation</th><th>Instance</th><th>Stage</th><th>Queue</th><th>Waiting</th><th>Worker</th><th>Kill</th></tr>
{{range .Ops}}<tr><td><a href="/status/operation?name={{.Name}}">{{.Name}}</a></td><td>{{or .Instance "(default)"}}</td><td>{{if and (not .LeasedAt.IsZero) (eq .Stage.String "QUEUED")}}held (not started){{else}}{{.Stage}}{{end}}</td><td>{{.Queue}}</td><td>{{ago $f.Now .QueuedAt}}</td><td>{{if not .LeasedAt.IsZero}}{{.Worker}}{{end}}</td>
<td>{{if $f.AdminOn .Instance}}<form class="inline" method="post" action="/status/kill"><input type="hidden" name="csrf" value="{{$f.Token}}"><input type="hidden" name="name" value="{{.Name}}"><button>Kill</button></form>{{else}}<span class="muted" title="killing needs the admin permission on the operation's instance">admin only</span>{{end}}</td></tr>
{{else}}<tr><td colspan="7" class="muted">none</td></tr>{{end}}</table>
{{template "pager" .OpPage}}

{{if .Admin}}<h2>Configuration</h2>
<form method="post" action="/status/reload"><input type="hidden" name="csrf" value="{{.Token}}"><button>Reload configuration</button> <span class="muted">re-reads the config file, as SIGHUP does</span></form>{{end}}
{{template "foot" .}}{{end}}

{{define "fairness"}}{{template "head" .}}
<p>Levels: {{if .Keys}}{{join .Keys " › "}}{{else}}none configured (scheduler.fairness.keys){{end}}. Share: the invocation's part of its parent's executing actions; fair: an even split among the siblings with work. Also as <a href="/status/fairness?format=text">text</a> and <a href="/status/fairness?format=json">JSON</a>.</p>
<table id="invocations"><tr><th>Invocation</th><th>Queued</th><th>Executing</th><th>Self queued</th><th>Self executing</th><th>Workers</th><th>Share</th><th>Fair</th><th>Last start</th></tr>
{{$f := .}}{{range .Rows}}<tr><td>{{indent .Depth}}{{.Key}}</td><td class="n">{{.Queued}}</td><td class="n">{{.Executing}}</td><td class="n">{{.SelfQueued}}</td><td class="n">{{.SelfExecuting}}</td><td class="n">{{.Workers}}</td><td class="n">{{pct .Share}}</td><td class="n">{{pct .FairShare}}</td><td>{{if not .LastStart.IsZero}}{{ago $f.Now .LastStart}} ago{{end}}</td></tr>{{end}}</table>
{{template "pager" .Page}}
{{template "foot" .}}{{end}}

{{define "failures"}}{{template "head" .}}
<p>The most recent failed operations (an error status or a non-zero exit code), newest first; the server keeps the last 500 in memory.</p>
<table id="failures"><tr><th>When (UTC)</th><th>Operation</th><th>Instance</th><th>Worker</th><th>Status</th><th>Exit</th><th>Message</th></tr>
{{range .Failures}}<tr><td>{{when .At}}</td><td><a href="/status/operation?name={{.Name}}">{{.Name}}</a></td><td>{{or .Instance "(default)"}}</td><td>{{.Worker}}</td><td>{{.Code}}</td><td class="n">{{.ExitCode}}</td><td>{{truncate .Message 200}}</td></tr>
{{else}}<tr><td colspan="7" class="muted">no failures</td></tr>{{end}}</table>
{{template "pager" .Page}}
{{if .Served}}<h2>Failed downloads</h2>
<p>Fetches from origins for the Remote Asset API (Bazel's remote downloader) that failed, newest first; the last 200 are kept in memory.</p>
<table id="download-failures"><tr><th>When (UTC)</th><th>Instance</th><th>Kind</th><th>URI</th><th>Error</th></tr>
{{range .Downloads}}<tr><td>{{when .At}}</td><td>{{or .Instance "(default)"}}</td><td>{{.Kind}}</td><td>{{truncate .URI 200}}</td><td>{{truncate .Err 300}}</td></tr>
{{else}}<tr><td colspan="5" class="muted">no failed downloads</td></tr>{{end}}</table>{{end}}
{{template "foot" .}}{{end}}

{{define "shapes"}}{{template "head" .}}
{{if .On}}<p>What the scheduler expects of each action shape (scheduler.durations), per worker class (the worker's cohort; - for none): decayed means over its runs. {{.Kept}} shapes kept; the {{len .Rows}} most recently run classes shown.</p>
<table id="shapes"><tr><th>Shape</th><th>Class</th><th>Runs</th><th>Wall</th><th>CPU</th><th>Peak memory</th><th>Last exit</th><th>Last run (UTC)</th>{{if .Classes}}<th>Runs on</th>{{end}}</tr>
{{range .Rows}}<tr><td>{{.Label}}</td><td>{{.Class}}</td><td class="n">{{printf "%.1f" .Runs}}</td><td class="n">{{.Wall}}</td><td class="n">{{.CPU}}</td><td class="n">{{.Memory}}</td><td class="n">{{.ExitCode}}</td><td>{{when .At}}</td>{{if $.Classes}}<td>{{.RunsOn}}</td>{{end}}</tr>
{{else}}<tr><td colspan="8" class="muted">nothing learned yet</td></tr>{{end}}</table>{{if .Classes}}
<p>With size classes, a class of the history is size:NAME; a shape runs on the smallest class within scheduler.size_classes.max_slowdown of the largest's time (the largest until it ran there), above any class its last run failed on.</p>{{end}}
{{else}}<p class="muted">No duration history is kept (scheduler.durations.max_shapes is 0).</p>{{end}}
{{template "foot" .}}{{end}}

{{define "operation"}}{{template "head" .}}
{{$f := .}}
<table id="summary">
<tr><th>State</th><td>{{if .Op.Done}}completed{{else}}{{.Op.Stage}}{{end}}</td></tr>
<tr><th>Instance</th><td>{{or .Op.Instance "(default)"}}</td></tr>
<tr><th>Action</th><td>{{.Op.ActionDigest}}</td></tr>
<tr><th>Queue</th><td>{{.Op.Queue}} (priority {{.Op.Priority}}, {{.Op.Cores}} cores)</td></tr>
<tr><th>Invocation</th><td>{{path .Op.Invocation}}</td></tr>
<tr><th>Attempts</th><td>{{.Op.Attempts}}</td></tr>
<tr><th>Worker</th><td>{{.Op.Worker}}</td></tr>
<tr><th>Input root</th><td id="input-root">{{with .Input}}<span title="{{.Bytes}} bytes">{{.Files}} files, {{bytes .Bytes}}</span>{{else}}<span class="muted">not known yet (a Gantry worker reports it with the result)</span>{{end}}</td></tr>
</table>
{{if and (not .Op.Done) (.AdminOn .Op.Instance)}}<form method="post" action="/status/kill"><input type="hidden" name="csrf" value="{{.Token}}"><input type="hidden" name="name" value="{{.Op.Name}}"><input type="hidden" name="back" value="/status/operation?name={{.Op.Name}}"><button>Kill this operation</button></form>{{end}}
{{range .Problems}}<p class="flash">{{.}}</p>{{end}}
{{with .Why}}{{template "whyqueued" .}}{{end}}
{{with .Live}}{{template "liveoutput" .}}{{end}}
<h2>Command</h2>
{{with .Command}}<pre id="command">{{join .Arguments " "}}</pre>
{{if .WorkingDirectory}}<p>Working directory: {{.WorkingDirectory}}</p>{{end}}
{{if .EnvironmentVariables}}<table><tr><th>Environment</th><th>Value</th></tr>{{range .EnvironmentVariables}}<tr><td>{{.Name}}</td><td>{{.Value}}</td></tr>{{end}}</table>{{end}}
{{if .OutputPaths}}<p>Outputs: {{join .OutputPaths ", "}}</p>{{end}}{{if .OutputFiles}}<p>Output files: {{join .OutputFiles ", "}}</p>{{end}}{{if .OutputDirectories}}<p>Output directories: {{join .OutputDirectories ", "}}</p>{{end}}{{end}}
<h2>Platform</h2>
{{if .Op.Platform}}<table><tr><th>Property</th><th>Value</th></tr>{{range .Op.Platform}}<tr><td>{{.Name}}</td><td>{{.Value}}</td></tr>{{end}}</table>{{else}}<p class="muted">none</p>{{end}}
{{with .Action}}<p>{{with .Timeout}}Timeout {{.AsDuration}} · {{end}}{{if .DoNotCache}}not cached · {{end}}input root {{with .InputRootDigest}}{{.Hash}}/{{.SizeBytes}}{{end}}</p>{{end}}
{{with .Op.Retries}}<h2>Retries and pre-emptions</h2>
<table id="retries"><tr><th>At (UTC)</th><th>Worker</th><th>What</th><th>Why</th></tr>
{{range .}}<tr><td>{{when .At}}</td><td>{{.Worker}}</td><td>{{.Kind}}</td><td>{{.Reason}}</td></tr>{{end}}</table>{{end}}
<h2>Timeline</h2>
<table id="timeline"><tr><th>Stage</th><th>At (UTC)</th><th>Since queued</th></tr>
{{$q := .Op.QueuedAt}}{{range .Timeline}}<tr><td>{{.What}}</td><td>{{when .At}}</td><td>{{since $q .At}}</td></tr>{{end}}</table>
{{if .Op.Expected}}<p id="expected">Expected {{.Op.Expected}} (the duration history of its action shape){{if .Op.Done}}{{if .Took}}; executed in {{.Took}}, {{.Ratio}}× expected{{end}}{{else if not .Op.LeasedAt.IsZero}}; running since {{when .Op.LeasedAt}}{{end}}.</p>{{end}}
{{if .Stages}}<table id="stages"><tr><th>Stage</th><th>Duration</th></tr>
{{range .Stages}}<tr><td>{{.Name}}</td><td class="n">{{.D}}</td></tr>{{end}}
{{if .Total}}<tr><th>total</th><th class="n">{{.Total}}</th></tr>{{end}}</table>{{end}}
{{if .Op.Done}}<h2>Result</h2>
<table id="result"><tr><th>Status</th><td>{{.Code}}</td></tr>{{if .Message}}<tr><th>Message</th><td>{{.Message}}</td></tr>{{end}}
{{with .Result}}<tr><th>Exit code</th><td>{{.ExitCode}}</td></tr>{{end}}</table>
{{if .Outputs}}<table id="outputs"><tr><th>Output</th><th>Size</th><th></th></tr>
{{range .Outputs}}<tr><td>{{.Name}}</td><td>{{if .Link}}{{bytes .Digest.Size}}{{else}}{{len .Inline}} B inline{{end}}</td><td>{{if .Link}}<a href="{{.Link}}" download>download</a>{{else}}<pre>{{truncate .Inline 4096}}</pre>{{end}}{{if .Head}}<pre class="stream">{{.Head}}{{if .Omitted}}
… {{bytes .Omitted}} not shown: download it …
{{.Tail}}{{end}}</pre>{{end}}</td></tr>{{end}}</table>{{end}}
{{end}}
{{template "foot" .}}{{end}}
`))
