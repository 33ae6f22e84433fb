package statestore

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gantry-build/gantry/internal/recordlog"
)

// The embedded store's committer keeps up to commitDepth records in flight:
// it writes the next group's record as soon as it is queued and starts its
// fdatasync while the previous record's still runs, instead of waiting for
// it. On a disk whose flush is a full cache flush of the device (this
// project's VMs: write-back cache, no FUA), two flushes in flight make two
// to seven times the commits a second of one at a time, and a caller no
// longer waits for the commit in progress before its own starts
// (docs/PERFORMANCE-HISTORY.md, "issue 23 item 1").
//
// Three goroutines share the work:
//   - the committer (run) takes the queued requests, writes their record
//     and hands it on; it owns the log, the sequence number and
//     compaction;
//   - a record's flush runs on a goroutine of its own (flush), or on the
//     completer when no other record was in flight as it was written;
//   - the completer (complete) takes the records in order, waits for each
//     one's flush, applies its mutations to memory and answers its callers.
//
// A record written while an older one's flush runs repeats the older
// one's mutations (record.go), so that a crash keeping it and tearing the
// older loses nothing acknowledged or not; a record's callers are told
// only once its own flush has ended, in order.
const commitDepth = 2

// flight is one record written to the log whose flush may still run.
type flight struct {
	reqs  []*request
	muts  []Mutation // the record's own mutations, not those it repeats
	refs  []valueRef // where their values lie in the log
	seq   uint64
	log   *recordlog.Log
	end   int64 // where the record ends in log
	start time.Time
	err   error         // the write's or flush's failure, set before flush closes
	flush chan struct{} // closed when the flush has ended
	// alone is set when no other record was in flight as this one was
	// written: the completer, idle then, flushes it itself (one goroutine
	// hand-off fewer for a lone commit); otherwise a goroutine of its
	// own does, so that its flush overlaps the older one's.
	alone bool
}

// pipeline is the state the committer and completer share.
type pipeline struct {
	slots chan struct{} // one per record in flight, up to commitDepth

	mu       sync.Mutex
	unsynced []*flight // written, not yet completed, in order
	broken   error     // once set, every commit fails
}

func newPipeline() *pipeline {
	return &pipeline{slots: make(chan struct{}, commitDepth)}
}

func (p *pipeline) brokenErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.broken
}

func (p *pipeline) breakWith(err error) {
	p.mu.Lock()
	if p.broken == nil {
		p.broken = err
	}
	p.mu.Unlock()
}

// run is the committer goroutine: it writes a record for each group the
// queue gives it and hands it to the completer, until the queue is closed
// and every record has completed.
func (s *Embedded) run() {
	defer close(s.q.done)
	inFlight := make(chan *flight, commitDepth)
	completed := make(chan struct{})
	go s.complete(inFlight, completed)
	last := 0
	for {
		// Wait for room first: the groups queued meanwhile then go into
		// one record; after a large group, gather more (gather.go).
		s.pipe.slots <- struct{}{}
		gather(last)
		reqs := s.q.next()
		last = len(reqs)
		if len(reqs) == 0 {
			<-s.pipe.slots
			break
		}
		start := time.Now()
		if s.wantCompaction() {
			s.drain()
			if err := s.startCompaction(); err != nil {
				s.compactErr.Store(&err)
			}
		}
		f := s.write(reqs, start)
		switch {
		case f.err != nil:
			close(f.flush)
		case !f.alone:
			go s.flush(f)
		}
		inFlight <- f
	}
	close(inFlight)
	<-completed
}

// drain waits until no record but the caller's slot is in flight: every
// record written has completed.
func (s *Embedded) drain() {
	for range commitDepth - 1 {
		s.pipe.slots <- struct{}{}
	}
	for range commitDepth - 1 {
		<-s.pipe.slots
	}
}

// write appends the record of reqs to the log, repeating the mutations of
// the records whose flush has not completed.
func (s *Embedded) write(reqs []*request, start time.Time) *flight {
	f := &flight{reqs: reqs, start: start, log: s.log, flush: make(chan struct{})}
	if err := s.pipe.brokenErr(); err != nil {
		f.err = err
		return f
	}
	if len(reqs) == 1 {
		f.muts = reqs[0].batch
	} else {
		n := 0
		for _, r := range reqs {
			n += len(r.batch)
		}
		f.muts = make([]Mutation, 0, n)
		for _, r := range reqs {
			f.muts = append(f.muts, r.batch...)
		}
	}
	s.pipe.mu.Lock()
	older := append([]*flight(nil), s.pipe.unsynced...)
	s.pipe.mu.Unlock()
	f.alone = len(older) == 0
	if f.alone {
		s.buf, s.at = appendRecordAt(s.buf[:0], s.seq, s.seq, f.muts, s.at[:0])
	} else {
		n := len(f.muts)
		for _, o := range older {
			n += len(o.muts)
		}
		all := make([]Mutation, 0, n)
		for _, o := range older {
			all = append(all, o.muts...)
		}
		all = append(all, f.muts...)
		s.buf, s.at = appendRecordAt(s.buf[:0], s.seq, older[0].seq, all, s.at[:0])
	}
	off, err := s.log.Append(s.buf)
	if err != nil {
		if errors.Is(err, recordlog.ErrNotRepaired) {
			s.pipe.breakWith(fmt.Errorf("statestore: the state log could not be repaired after a failed write (%v): restart to recover", err))
		}
		f.err = fmt.Errorf("statestore: writing the state log: %w", err)
		return f
	}
	f.end = off + int64(len(s.buf))
	f.refs = make([]valueRef, len(f.muts))
	own := s.at[len(s.at)-len(f.muts):]
	for i, m := range f.muts {
		if !m.Delete && len(m.Value) > 0 {
			f.refs[i] = valueRef{file: logID(s.logGen), off: off + int64(own[i]), n: uint32(len(m.Value))}
		}
	}
	f.seq = s.seq
	s.seq++
	if cap(s.buf) > 4<<20 {
		s.buf = nil // do not keep a large group's buffer
	}
	s.pipe.mu.Lock()
	s.pipe.unsynced = append(s.pipe.unsynced, f)
	s.pipe.mu.Unlock()
	return f
}

// flush makes f's record durable.
func (s *Embedded) flush(f *flight) {
	if err := f.log.Sync(f.end); err != nil {
		// After a failed fsync the kernel's copy of the file cannot be
		// trusted: refuse further commits; a restart replays what is there.
		err = fmt.Errorf("statestore: syncing the state log failed (%v): restart to recover", err)
		s.pipe.breakWith(err)
		f.err = err
	}
	close(f.flush)
}

// complete is the completer goroutine: it finishes the records in the
// order they were written, each once its flush has ended.
func (s *Embedded) complete(in <-chan *flight, done chan<- struct{}) {
	defer close(done)
	for f := range in {
		if f.alone && f.err == nil {
			s.flush(f)
		}
		<-f.flush
		err := f.err
		if err == nil {
			// A record after one whose flush failed is not trusted
			// either, even if its own flush succeeded.
			err = s.pipe.brokenErr()
		}
		if err == nil {
			s.dataMu.Lock()
			s.applyLocked(f.muts, f.refs)
			s.dataMu.Unlock()
			s.logBytes.Store(f.end)
			s.commits.Add(1)
		}
		s.pipe.mu.Lock()
		if len(s.pipe.unsynced) > 0 && s.pipe.unsynced[0] == f {
			s.pipe.unsynced[0] = nil
			s.pipe.unsynced = s.pipe.unsynced[1:]
		}
		s.pipe.mu.Unlock()
		s.q.finish(f.reqs, err, time.Since(f.start))
		<-s.pipe.slots
	}
}
