package scheduler

// A finished operation is shown done (Watch, List, and so every client
// call) only once its result is stored: a client must never be told of a
// result a restart would forget. Until then it shows EXECUTING, and its
// watchers are woken when the commit that holds it is reported.

// notifyDoneLocked wakes op's watchers, and reports it (finished.go), now
// or when its result is stored.
func (s *Scheduler) notifyDoneLocked(op *Operation) {
	if s.jr == nil {
		s.notifyOpLocked(op)
		s.reportLocked(op)
		return
	}
	op.doneSeq = s.jr.seq
	s.jr.doneWait = append(s.jr.doneWait, op)
}

// storedLocked reports whether op's result is stored (or needs no store).
func (s *Scheduler) storedLocked(op *Operation) bool {
	j := s.jr
	if j == nil || op.doneSeq == 0 {
		return true
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return op.doneSeq <= j.stored
}

// notifyStored wakes the watchers of the operations whose results a
// commit has just stored. It is called without s.mu, after the journal's
// record (lock order: s.mu before jr.mu).
func (s *Scheduler) notifyStored() {
	j := s.jr
	// After a failed commit, stored stays where it was: later results
	// stay unseen (the server must restart), and their watchers wait
	// until the caller gives up.
	j.mu.Lock()
	stored := j.stored
	j.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n < len(j.doneWait) && j.doneWait[n].doneSeq <= stored {
		s.notifyOpLocked(j.doneWait[n])
		s.reportLocked(j.doneWait[n])
		n++
	}
	if n > 0 {
		rest := copy(j.doneWait, j.doneWait[n:])
		clear(j.doneWait[rest:])
		j.doneWait = j.doneWait[:rest]
	}
}
