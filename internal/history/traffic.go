package history

import "sync"

// traffic gathers the CAS bytes builds' clients send and receive between
// two rounds of the Recorder's writing loop, under a lock of its own: a
// storage call costs one map update, never the Recorder's lock.
type traffic struct {
	mu    sync.Mutex
	bytes map[string]*flow
}

// flow is one build's bytes up (uploaded into the CAS) and down.
type flow struct{ up, down int64 }

// maxUnattached bounds the builds whose bytes wait for their first
// operation (see Recorder.foldTraffic): clients that only read and write
// the cache never get one.
const maxUnattached = 4096

// AddTraffic counts up bytes uploaded to the CAS and down bytes
// downloaded from it (or inlined in an action result) by a call of build
// (the client's tool_invocation_id). The bytes join the build's summary
// within FlushEvery; those of a build no operation was recorded for yet
// wait for its first one (at most maxUnattached builds wait).
func (r *Recorder) AddTraffic(build string, up, down int64) {
	if build == "" || up == 0 && down == 0 {
		return
	}
	t := &r.traffic
	t.mu.Lock()
	f := t.bytes[build]
	if f == nil {
		if t.bytes == nil {
			t.bytes = map[string]*flow{}
		}
		f = &flow{}
		t.bytes[build] = f
	}
	f.up += up
	f.down += down
	t.mu.Unlock()
}

// take returns the gathered bytes and starts afresh.
func (t *traffic) take() map[string]*flow {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.bytes
	t.bytes = nil
	return m
}

// foldTraffic adds the gathered bytes to their builds, marking them to be
// written. Bytes of builds not (yet) in the history wait in unattached
// for the build's first operation (Record adds them); when too many
// wait, they are dropped: those builds' clients only used the cache.
func (r *Recorder) foldTraffic() {
	m := r.traffic.take()
	if len(m) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	attached := false
	for id, f := range m {
		if b := r.builds[id]; b != nil {
			b.BytesUp += f.up
			b.BytesDown += f.down
			r.dirty[id] = true
			attached = true
			continue
		}
		w := r.unattached[id]
		if w == nil {
			if len(r.unattached) >= maxUnattached {
				clear(r.unattached)
			}
			w = &flow{}
			r.unattached[id] = w
		}
		w.up += f.up
		w.down += f.down
	}
	if attached {
		r.seq++
	}
}
