package scheduler

import (
	"time"
)

// A task's shape survives a restart with its task: the record of an
// unfinished task keeps the shape's key, whether its invocation runs
// longest first, the client's timeout and its critical path (task
// records from version 2 on, recordTaskV2), and the restored task looks
// its expected time up in the history again. The key is kept rather
// than derived again: the ShapeProperty override is no longer in the
// stored platform, the mnemonic is in the operation's record, and
// deriving a million keys would slow the restore down.

// recordTaskV2 is the version of task records that carry the task's
// shape.
const recordTaskV2 = 2

// taskShapeRecord is what a task record keeps of its shape.
type taskShapeRecord struct {
	ID, Label string
	Longest   bool
	// Client is the action's own timeout; Tail its critical path.
	Client, Tail time.Duration
}

// shapeRecordLocked is what t's record keeps of its shape (nil: none).
func (s *Scheduler) shapeRecordLocked(t *Task) *taskShapeRecord {
	ts := s.shapeOf[t]
	if ts == nil {
		return nil
	}
	return &taskShapeRecord{ID: ts.key.ID, Label: ts.key.Label, Longest: t.rank != 0, Client: ts.client, Tail: ts.tail}
}

// size is at most what write appends.
func (r *taskShapeRecord) size() int { return strSize(r.ID) + strSize(r.Label) + 1 + 2*10 }

func (r *taskShapeRecord) write(w *recWriter) {
	w.str(r.ID)
	w.str(r.Label)
	w.bool(r.Longest)
	w.int(int64(r.Client))
	w.int(int64(r.Tail))
}

func readShapeRecord(r *recReader) *taskShapeRecord {
	sr := &taskShapeRecord{ID: r.str("shape id"), Label: r.str("shape label"), Longest: r.bool("longest first")}
	sr.Client, sr.Tail = time.Duration(r.int("client timeout")), time.Duration(r.int("critical path"))
	if sr.Client < 0 || sr.Tail < 0 {
		r.fail("shape durations")
	}
	return sr
}

// restoreShapeLocked gives the restored task t its shape back from its
// record (nil: it had none, or an older Gantry stored it), with the
// expected time the history knows now. A task whose learned timeout had
// fired (its retries say so) runs with the client's; a leased one is
// taken to run with the learned timeout it would get now (the worker
// has the one it was given), so that one firing is retried as before
// the restart.
func (s *Scheduler) restoreShapeLocked(t *Task, r *taskShapeRecord, now time.Time) {
	if r == nil || s.cfg.Shapes == nil {
		return
	}
	exp, weight := s.cfg.Shapes.Expected(r.ID, now)
	ts := &taskShape{key: shapeKey{ID: r.ID, Label: r.Label}, expected: exp, known: weight > 0, weight: weight,
		client: r.Client, tail: clampTail(r.Tail)}
	for _, rt := range t.retries {
		if rt.Kind == RetryLearnedTimeout {
			ts.fired = max(s.cfg.LearnedTimeouts.learnedTimeout(ts, ts.client), time.Nanosecond)
		}
	}
	s.noteShapeLocked(t, ts, r.Longest)
	if t.state == stateLeased && ts.fired == 0 {
		ts.applied = s.cfg.LearnedTimeouts.learnedTimeout(ts, ts.client)
	}
}
