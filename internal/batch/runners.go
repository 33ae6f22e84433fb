package batch

// runners runs steps on goroutines that are kept for the next step rather
// than started anew for each. A step (scanning a compile's includes,
// building its input tree) runs deep call chains: a new goroutine's small
// stack grows by copying several times for every step, 3-4% of the client's
// CPU in a cold batch, where a kept goroutine's stack has grown already.
// There are as many goroutines as steps ever ran at once; they end with
// close.
type runners struct {
	work    chan func()
	started int // goroutines started, for tests; run has one caller at a time
}

func newRunners() *runners { return &runners{work: make(chan func())} }

// run runs fn on an idle goroutine, or on a new one if none is idle. It
// is called by one goroutine at a time.
func (r *runners) run(fn func()) {
	select {
	case r.work <- fn:
	default:
		r.started++
		go r.loop(fn)
	}
}

func (r *runners) loop(fn func()) {
	for {
		fn()
		var ok bool
		if fn, ok = <-r.work; !ok {
			return
		}
	}
}

// close ends the idle goroutines once no step runs.
func (r *runners) close() { close(r.work) }
