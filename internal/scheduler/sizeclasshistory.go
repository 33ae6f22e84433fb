package scheduler

import "time"

// classStats returns copies of shape id's history per class, with their
// weights decayed to now; nil for a shape never seen.
func (h *ShapeHistory) classStats(id string, now time.Time) map[string]ClassStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.shapes[id]
	if !ok {
		return nil
	}
	sh := e.Value.(*Shape)
	out := make(map[string]ClassStats, len(sh.Classes))
	for name, c := range sh.Classes {
		cc := *c
		cc.Weight *= h.decay(c.At, now)
		out[name] = cc
	}
	return out
}

// RecordFailure notes that a run of shape k failed on class at now for
// want of size: the size classes pass the class over until a run
// succeeds there again. It adds no sample.
func (h *ShapeHistory) RecordFailure(k shapeKey, class string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.classLocked(k, class, now)
	c.FailedAt = now
	h.dirty[k.ID] = true
	h.evictLocked()
	h.kickLocked()
}
