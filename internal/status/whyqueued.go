package status

import "html/template"

// The operation page's "why is it still queued" section, from
// scheduler.WhyQueued: where it waits and what is ahead, its invocation's
// place in the fair share, its instance's quotas, and the workers that
// could run it (busy) or cannot (and why).
func init() {
	template.Must(templates.Parse(`
{{define "whyqueued"}}<h2>Why is it still queued?</h2>
<table id="why-queued">
<tr><th>Queue</th><td>{{.Queue}}{{with .Request.Properties}} · platform {{.}}{{end}} · priority {{.Priority}}</td></tr>
<tr><th>Position</th><td>{{.Ahead}} of the {{.Waiting}} actions waiting with the same queue, instance and platform go first (higher priority or queued earlier); across invocations the fair share decides</td></tr>
<tr><th>Waiting since (UTC)</th><td>{{when .QueuedAt}}</td></tr>
</table>
{{if .Levels}}<table id="why-fairness"><tr><th>Invocation level</th><th>Queued</th><th>Executing</th><th>Other invocations with queued work</th></tr>
{{range .Levels}}<tr><td>{{or .Key "(none)"}}</td><td class="n">{{.Queued}}</td><td class="n">{{.Executing}}</td><td class="n">{{.Siblings}}</td></tr>{{end}}</table>{{end}}
{{if .Quotas}}<table id="why-quotas"><tr><th>Cohort</th><th>Min</th><th>Max</th><th>Executing</th><th>Queued</th><th>Cohort slots</th></tr>
{{range .Quotas}}<tr><td>{{.Cohort}}</td><td class="n">{{.Min}}</td><td class="n">{{if lt .Max 0}}none{{else}}{{.Max}}{{end}}</td><td class="n">{{.Usage}}</td><td class="n">{{.Queued}}</td><td class="n">{{.CohortSlots}}</td></tr>{{end}}</table>{{end}}
<h3>Workers that could run it</h3>
{{if .Able}}<table id="why-able"><tr><th>Worker</th><th>State</th><th>Running</th><th>Slots</th><th>Asking for work</th></tr>
{{range .Able}}<tr><td>{{.Worker}}</td><td class="st-{{.State}}">{{.State}}</td><td class="n">{{.Running}}</td><td class="n">{{.Slots}}</td><td>{{if .Polling}}yes{{else}}no{{end}}</td></tr>{{end}}</table>
{{else}}<p class="flash">No registered worker can run this action{{if not .FailsAt.IsZero}}; unless one that can registers, it fails at {{when .FailsAt}} UTC (scheduler.unsatisfiable_wait){{end}}.</p>{{end}}
{{if .Unable}}<h3>Workers that cannot run it</h3>
<table id="why-unable"><tr><th>Worker</th><th>Why not</th></tr>
{{range .Unable}}<tr><td>{{.Worker}}</td><td>{{range .Reasons}}<div>{{.}}</div>{{end}}</td></tr>{{end}}</table>{{end}}
{{end}}
`))
}
