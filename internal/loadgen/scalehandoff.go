package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The scheduler's own share of dispatch, read from its histograms
// (gantry_scheduler_handoff_seconds, _lock_seconds, _store_seconds) before and after
// the drain: the worker processes' figure adds their own wake-ups.

// promHistogram is a histogram of a Prometheus text exposition:
// cumulative counts by upper bound, the last +Inf.
type promHistogram struct {
	bounds []float64
	cum    []float64
}

// scrapeHistogram reads histogram name from the server's /metrics (empty
// when it cannot).
func scrapeHistogram(ctx context.Context, httpAddr, name string) promHistogram {
	if httpAddr == "" {
		return promHistogram{}
	}
	body, err := get(ctx, &http.Client{Timeout: time.Minute}, "http://"+httpAddr+"/metrics")
	if err != nil {
		return promHistogram{}
	}
	return parseHistogram(body, name)
}

// parseHistogram reads histogram name from a text exposition (its one
// series: le its only label, or le last).
func parseHistogram(text []byte, name string) promHistogram {
	var h promHistogram
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, 1<<20)
	prefix := name + `_bucket{`
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		i := strings.Index(rest, `le="`)
		if i < 0 {
			continue
		}
		le, v, ok := strings.Cut(rest[i+len(`le="`):], `"} `)
		if !ok {
			continue
		}
		b, err1 := strconv.ParseFloat(le, 64)
		c, err2 := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		h.bounds, h.cum = append(h.bounds, b), append(h.cum, c)
	}
	return h
}

// since is what h counted after before was read.
func (h promHistogram) since(before promHistogram) promHistogram {
	if len(before.cum) != len(h.cum) {
		return h
	}
	out := promHistogram{bounds: h.bounds, cum: make([]float64, len(h.cum))}
	for i := range h.cum {
		out.cum[i] = h.cum[i] - before.cum[i]
	}
	return out
}

func (h promHistogram) count() float64 {
	if len(h.cum) == 0 {
		return 0
	}
	return h.cum[len(h.cum)-1]
}

// quantile is the q-quantile, interpolated within its bucket as
// Prometheus's histogram_quantile does; in the +Inf bucket, the last
// finite bound. 0 without samples.
func (h promHistogram) quantile(q float64) float64 {
	n := h.count()
	if n == 0 {
		return 0
	}
	rank := q * n
	lower, below := 0.0, 0.0
	for i, c := range h.cum {
		if c >= rank && c > below {
			if math.IsInf(h.bounds[i], 1) {
				return lower
			}
			return lower + (h.bounds[i]-lower)*(rank-below)/(c-below)
		}
		if !math.IsInf(h.bounds[i], 1) {
			lower = h.bounds[i]
		}
		below = c
	}
	return lower
}

// maxBound is the upper bound of the highest bucket with a sample: the
// largest sample is at most that (+Inf: above the last finite bound).
func (h promHistogram) maxBound() float64 {
	for i := len(h.cum) - 1; i >= 0; i-- {
		if i == 0 || h.cum[i] > h.cum[i-1] {
			if h.cum[i] == 0 {
				return 0
			}
			return h.bounds[i]
		}
	}
	return 0
}

// handoffScrape is the two histograms at one moment.
type handoffScrape struct{ total, lock, store, commit promHistogram }

func scrapeHandoffs(ctx context.Context, httpAddr string) handoffScrape {
	return handoffScrape{
		total: scrapeHistogram(ctx, httpAddr, "gantry_scheduler_handoff_seconds"),
		lock:  scrapeHistogram(ctx, httpAddr, "gantry_scheduler_handoff_lock_seconds"),
		store: scrapeHistogram(ctx, httpAddr, "gantry_scheduler_handoff_store_seconds"),
		// The store's group commits (write and fsync), which the
		// stored wait is for.
		commit: scrapeHistogram(ctx, httpAddr, "gantry_state_commit_duration_seconds"),
	}
}

// summarizeHandoffs fills in the server-side dispatch figures from the
// histograms' growth between before and after.
func (r *ScaleReport) summarizeHandoffs(before, after handoffScrape) {
	t, l, st := after.total.since(before.total), after.lock.since(before.lock), after.store.since(before.store)
	r.ServerHandoffN = int(t.count())
	if r.ServerHandoffN == 0 {
		return
	}
	r.ServerHandoffP50Ms, r.ServerHandoffP99Ms = roundTo(t.quantile(0.5)*1e3, 3), roundTo(t.quantile(0.99)*1e3, 3)
	r.ServerHandoffMaxMs = roundTo(t.maxBound()*1e3, 3)
	if math.IsInf(r.ServerHandoffMaxMs, 1) {
		r.ServerHandoffMaxMs = -1
	}
	r.ServerLockP50Ms, r.ServerLockP99Ms = roundTo(l.quantile(0.5)*1e3, 4), roundTo(l.quantile(0.99)*1e3, 4)
	r.ServerStoreP50Ms, r.ServerStoreP99Ms = roundTo(st.quantile(0.5)*1e3, 3), roundTo(st.quantile(0.99)*1e3, 3)
	c := after.commit.since(before.commit)
	r.CommitN, r.CommitP50Ms, r.CommitP99Ms = int(c.count()), roundTo(c.quantile(0.5)*1e3, 3), roundTo(c.quantile(0.99)*1e3, 3)
}
