package status

import (
	"net/http"
	"sort"
	"time"
)

// maxShapeRows bounds the shapes page: the most recently run first.
const maxShapeRows = 500

// shapeRow is one worker class of one action shape on the shapes page.
type shapeRow struct {
	Label, Class string
	// RunsOn is the size class the shape's history chooses now (first
	// row of a shape only; "" with size classes off).
	RunsOn    string
	Runs      float64
	Wall, CPU time.Duration
	Memory    int64
	ExitCode  int32
	At        time.Time
}

// shapes lists the duration history (scheduler.durations): per action
// shape and worker class, the decayed mean wall and CPU time and peak
// memory the scheduler expects.
func (h *Handler) shapes(w http.ResponseWriter, r *http.Request) {
	var rows []shapeRow
	kept := 0
	if h.opts.Shapes != nil {
		kept = h.opts.Shapes.Len()
		for _, sh := range h.opts.Shapes.Shapes(maxShapeRows) {
			classes := make([]string, 0, len(sh.Classes))
			for c := range sh.Classes {
				classes = append(classes, c)
			}
			sort.Strings(classes)
			runsOn := ""
			if h.opts.SizeClasses != nil {
				runsOn = h.opts.SizeClasses.RunsOn(sh.Classes)
			}
			for _, c := range classes {
				st := sh.Classes[c]
				rows = append(rows, shapeRow{Label: sh.Label, Class: c, Runs: st.Weight, Wall: seconds(st.Wall), CPU: seconds(st.CPU),
					Memory: int64(st.Memory), ExitCode: st.ExitCode, At: st.At, RunsOn: runsOn})
				runsOn = ""
			}
		}
	}
	h.render(w, "shapes", struct {
		frame
		Rows    []shapeRow
		Kept    int
		On      bool
		Classes bool
	}{h.frame(r, "Action durations", false), rows, kept, h.opts.Shapes != nil, h.opts.SizeClasses != nil})
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}
