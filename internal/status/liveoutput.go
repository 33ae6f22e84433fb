package status

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"

	"github.com/gantry-build/gantry/internal/auth"
	"github.com/gantry-build/gantry/internal/logstream"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// LiveOutput is where the pages read the output of running actions (the
// scheduler's log stream hub).
type LiveOutput interface {
	// Tail is up to max of the last bytes of stream n, its length and
	// whether it ended; ok is false for a stream not held.
	Tail(n logstream.Name, max int) (data []byte, end int64, done, ok bool)
	// Follow sends stream n from offset on as it comes, until it ends.
	Follow(ctx context.Context, n logstream.Name, offset, limit int64, send func([]byte) error) error
}

// liveTail is how much of each stream the operation page shows.
const liveTail = 16 << 10

// liveView is the live output section of a running operation's page,
// which refreshes itself: the tail of stdout and stderr, and links to
// them whole, as they come (a chunked text response: no script needed).
type liveView struct {
	Op             string
	Stdout, Stderr string
}

// liveView is the section for info, nil when there is none to show: the
// operation ended (its result shows the output), this process holds no
// streams, or the viewer may not read them (the execute permission on
// the instance, as for the operation over gRPC).
func (h *Handler) liveView(r *http.Request, info scheduler.OperationInfo) *liveView {
	if info.Done || h.opts.Live == nil || info.TaskID == "" {
		return nil
	}
	if h.authorize(r, auth.PermExecute, scope{instance: info.Instance}) != nil {
		return nil
	}
	v := &liveView{Op: info.Name}
	out, _, _, _ := h.opts.Live.Tail(logstream.ForTask(info.Instance, info.TaskID, logstream.Stdout), liveTail)
	errOut, _, _, _ := h.opts.Live.Tail(logstream.ForTask(info.Instance, info.TaskID, logstream.Stderr), liveTail)
	v.Stdout, v.Stderr = string(out), string(errOut)
	return v
}

// output serves /status/output?name=OP&stream=stdout|stderr: the
// stream as plain text, from the oldest byte kept, sent as it comes
// until the action ends.
func (h *Handler) output(w http.ResponseWriter, r *http.Request) {
	name, which := r.URL.Query().Get("name"), r.URL.Query().Get("stream")
	if which != logstream.Stdout && which != logstream.Stderr {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("stream %q: open /status/output?name=OPERATION&stream=stdout (or stderr)", which))
		return
	}
	if h.opts.Live == nil {
		h.fail(w, r, http.StatusNotFound, "this server holds no live output; the operation page shows the output once the action ends")
		return
	}
	info, err := h.sched.Operation(name)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("operation %q is not known here (it ended longer ago than scheduler.retention, or never existed); its page may still show its result", name))
		return
	}
	if err := h.authorize(r, auth.PermExecute, scope{instance: info.Instance, what: fmt.Sprintf(" (operation %q)", name)}); err != nil {
		h.fail(w, r, http.StatusForbidden, err.Error())
		return
	}
	stream := logstream.ForTask(info.Instance, info.TaskID, which)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	// nosniff: browsers show plain text as it arrives instead of
	// waiting for enough of it to guess its type.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	flusher, _ := w.(http.Flusher)
	send := func(b []byte) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	// Start from the oldest byte the hub keeps.
	kept, end, _, ok := h.opts.Live.Tail(stream, 1<<30)
	offset := int64(0)
	if ok {
		if err := send(kept); err != nil {
			return
		}
		offset = end
	}
	if err := h.opts.Live.Follow(r.Context(), stream, offset, 0, send); err != nil && !errors.Is(err, context.Canceled) && r.Context().Err() == nil {
		fmt.Fprintf(w, "\n[gantry: the live output ended early: %v]\n", err)
	}
}

var _ = template.Must(templates.Parse(`
{{define "liveoutput"}}<h2>Live output</h2>
<p class="muted">The last 16 KiB of each stream, as of this page's last refresh. Follow them as they come: <a href="/status/output?name={{.Op}}&amp;stream=stdout">stdout</a> · <a href="/status/output?name={{.Op}}&amp;stream=stderr">stderr</a>.</p>
<h3>stdout</h3><pre class="stream" id="live-stdout">{{.Stdout}}</pre>
<h3>stderr</h3><pre class="stream" id="live-stderr">{{.Stderr}}</pre>
{{end}}`))
