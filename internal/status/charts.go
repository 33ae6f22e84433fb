package status

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/gantry-build/gantry/internal/history"
)

// The charts page draws the history of the last hour (one point a
// minute) and the last day (one every 15 minutes) as SVG images rendered
// here: no scripts, so the pages' CSP stays default-src 'none' (images
// from 'self').

// window is one span the charts show.
type window struct {
	Name  string
	Title string
	Step  time.Duration
	N     int
}

var windows = []window{
	{"1h", "Last hour, per minute", time.Minute, 60},
	{"1d", "Last day, per 15 minutes", 15 * time.Minute, 96},
}

// chart is one series the charts page draws.
type chart struct {
	Name, Title, Unit string
	// lines are the series, each a value per point.
	lines []func(p history.Point, step time.Duration, slots int) float64
	names []string
}

var charts = []chart{
	{Name: "throughput", Title: "Actions finished per minute", Unit: "/min", names: []string{"executed", "cache hits"},
		lines: []func(history.Point, time.Duration, int) float64{
			func(p history.Point, step time.Duration, _ int) float64 { return float64(p.Executed) / step.Minutes() },
			func(p history.Point, step time.Duration, _ int) float64 { return float64(p.CacheHits) / step.Minutes() },
		}},
	{Name: "queue", Title: "Queue time (upper bounds)", Unit: "s", names: []string{"p50", "p95"},
		lines: []func(history.Point, time.Duration, int) float64{
			func(p history.Point, _ time.Duration, _ int) float64 { return p.QueueP50.Seconds() },
			func(p history.Point, _ time.Duration, _ int) float64 { return p.QueueP95.Seconds() },
		}},
	{Name: "cachehits", Title: "Cache hit ratio", Unit: "%", names: []string{"hits"},
		lines: []func(history.Point, time.Duration, int) float64{
			func(p history.Point, _ time.Duration, _ int) float64 {
				if n := p.Executed + p.CacheHits; n > 0 {
					return 100 * float64(p.CacheHits) / float64(n)
				}
				return 0
			},
		}},
	{Name: "utilisation", Title: "Worker utilisation (execute time over the slots registered now)", Unit: "%", names: []string{"busy"},
		lines: []func(history.Point, time.Duration, int) float64{
			func(p history.Point, step time.Duration, slots int) float64 {
				if slots == 0 {
					return 0
				}
				return math.Min(100, 100*p.Busy.Seconds()/(step.Seconds()*float64(slots)))
			},
		}},
	{Name: "failures", Title: "Failed actions per minute", Unit: "/min", names: []string{"failed"},
		lines: []func(history.Point, time.Duration, int) float64{
			func(p history.Point, step time.Duration, _ int) float64 { return float64(p.Failed) / step.Minutes() },
		}},
}

// chartsPage shows every chart for every window.
func (h *Handler) chartsPage(w http.ResponseWriter, r *http.Request) {
	if h.hist == nil {
		h.fail(w, r, http.StatusNotFound, "this server keeps no history to chart: set status.history.max_operations above 0")
		return
	}
	h.render(w, "charts", struct {
		frame
		Windows []window
		Charts  []chart
	}{h.frame(r, "Charts", true), windows, charts})
}

// chartSVG draws one chart (?chart=NAME&window=1h|1d).
func (h *Handler) chartSVG(w http.ResponseWriter, r *http.Request) {
	if h.hist == nil {
		http.Error(w, "no history is kept (status.history.max_operations is 0)", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	var c *chart
	for i := range charts {
		if charts[i].Name == q.Get("chart") {
			c = &charts[i]
		}
	}
	var win *window
	for i := range windows {
		if windows[i].Name == q.Get("window") {
			win = &windows[i]
		}
	}
	if c == nil || win == nil {
		http.Error(w, "unknown chart or window: use chart=throughput|queue|cachehits|utilisation|failures and window=1h|1d", http.StatusBadRequest)
		return
	}
	slots := 0
	for _, ws := range h.sched.Workers() {
		slots += ws.Info.Slots
	}
	end := time.Now().Truncate(win.Step).Add(win.Step)
	pts := h.hist.Series(end, win.Step, win.N)
	series := make([][]float64, len(c.lines))
	for i, f := range c.lines {
		series[i] = make([]float64, len(pts))
		for j, p := range pts {
			series[i][j] = f(p, win.Step, slots)
		}
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	fmt.Fprint(w, drawSVG(c.Title, c.Unit, c.names, series, end.Add(-time.Duration(win.N)*win.Step), win.Step))
}

// drawSVG draws lines (each a value per step from start) on shared axes.
func drawSVG(title, unit string, names []string, lines [][]float64, start time.Time, step time.Duration) string {
	const width, height, left, right, top, bottom = 640, 200, 52, 12, 26, 26
	colours := []string{"#2a6", "#36c", "#c63"}
	top0 := 0.0
	for _, l := range lines {
		for _, v := range l {
			top0 = math.Max(top0, v)
		}
	}
	ymax := niceCeil(top0)
	n := 0
	if len(lines) > 0 {
		n = len(lines[0])
	}
	x := func(i int) float64 {
		if n <= 1 {
			return left
		}
		return left + float64(i)*(width-left-right)/float64(n-1)
	}
	y := func(v float64) float64 { return height - bottom - v/ymax*(height-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`, width, height)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13">%s</text>`, left, template.HTMLEscapeString(title))
	for i, name := range names {
		fmt.Fprintf(&b, `<text x="%d" y="16" fill="%s">■ %s</text>`, width-right-90*(len(names)-i), colours[i%len(colours)], template.HTMLEscapeString(name))
	}
	for _, f := range []float64{0, 0.5, 1} {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`, left, width-right, y(f*ymax), y(f*ymax))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s%s</text>`, left-4, y(f*ymax)+4, trim(f*ymax), template.HTMLEscapeString(unit))
	}
	for k, i := range []int{0, n / 2, n - 1} {
		if i < 0 {
			continue
		}
		anchor := []string{"start", "middle", "end"}[k]
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s">%s</text>`, x(i), height-8, anchor, start.Add(time.Duration(i)*step).UTC().Format("15:04"))
	}
	for li, l := range lines {
		pts := make([]string, len(l))
		for i, v := range l {
			pts[i] = fmt.Sprintf("%.1f,%.1f", x(i), y(v))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, colours[li%len(colours)], strings.Join(pts, " "))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceCeil is the smallest of 1, 2 and 5 times a power of ten at least v
// (1 for nothing).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trim(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func init() {
	template.Must(templates.Parse(`
{{define "charts"}}{{template "head" .}}
<p>From the history of finished operations (status.history): operations that fell out of it are missing. Queue times are the upper bounds of histogram buckets; utilisation is the execute time of the operations finished in each interval over the execute slots of the workers registered now.</p>
{{$c := .Charts}}{{range .Windows}}{{$w := .}}<h2>{{.Title}}</h2>
{{range $c}}<p><img src="/status/chart.svg?chart={{.Name}}&amp;window={{$w.Name}}" width="640" height="200" alt="{{.Title}}, {{$w.Title}}"></p>{{end}}{{end}}
{{template "foot" .}}{{end}}
`))
}
