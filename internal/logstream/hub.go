package logstream

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Options bound what a Hub keeps.
type Options struct {
	// Buffer is how many bytes of each stream are kept: the last Buffer
	// bytes (a reader asking for older ones is told where to start).
	Buffer int
	// Keep is how long a finished stream stays readable.
	Keep time.Duration
	// MaxStreams bounds the streams held at once (finished ones count
	// until they are dropped); 0 means DefaultMaxStreams.
	MaxStreams int
	// LeaseHolds reports whether lease is the current lease of task; a
	// worker may write an action's stream only while it holds the
	// action. Nil allows every writer (tests).
	LeaseHolds func(task, lease string) bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultBuffer     = 1 << 20
	DefaultKeep       = 5 * time.Minute
	DefaultMaxStreams = 4096
	// idleFinish ends a stream nobody has written for this long and
	// whose action was never reported finished (a worker and a
	// scheduler that both went away), so that its readers end.
	idleFinish = time.Hour
	// pendingWait bounds how long a reader waits for a stream that does
	// not exist yet (its action is queued, or wrote nothing so far).
	pendingWait = time.Hour
	// chunkSize bounds the bytes of one message to a reader.
	chunkSize = 64 << 10
)

// Hub holds the live streams of one scheduler: every operation of the
// scheduler names its streams, so they live where the scheduler does, and
// frontends of a cluster forward to it.
type Hub struct {
	opts Options

	mu      sync.Mutex
	streams map[string]*stream // by read name
	// created is closed and replaced whenever a stream is added, for
	// readers waiting for theirs; waiting counts those readers by name.
	created chan struct{}
	waiting map[string]int
}

// stream is one log stream; Hub.mu guards it.
type stream struct {
	// buf holds the bytes [start, end) of the stream.
	buf        []byte
	start, end int64
	// writer is the token of the current writer; base is the stream's
	// length when it began writing (its own offsets count from there).
	writer string
	base   int64
	// retired are writers replaced by a newer one (an action that
	// started again on another lease): their writes are refused.
	retired   map[string]bool
	done      bool
	doneAt    time.Time
	lastWrite time.Time
	changed   chan struct{}
}

// NewHub returns an empty hub.
func NewHub(opts Options) *Hub {
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Hub{opts: opts, streams: map[string]*stream{}, created: make(chan struct{}), waiting: map[string]int{}}
}

// restartNote goes between the output of two attempts of an action.
const restartNote = "\n[gantry: the action started again on another worker; its output follows]\n"

// Append writes data at offset (counted from where this writer began) to
// the stream w names, and finishes the stream if finish is set. It
// returns the bytes this writer has committed.
func (h *Hub) Append(w Name, offset int64, data []byte, finish bool) (int64, error) {
	now := h.opts.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.writableLocked(w, now)
	if err != nil {
		return 0, err
	}
	committed := s.end - s.base
	if offset > committed {
		return committed, status.Errorf(codes.OutOfRange, "log stream %s: write_offset %d is past the %d bytes committed; resume from %d", w.Read(), offset, committed, committed)
	}
	if offset < 0 {
		return committed, status.Errorf(codes.InvalidArgument, "log stream %s: write_offset %d is negative", w.Read(), offset)
	}
	// Bytes already committed (a writer resending) are skipped.
	data = data[min(int64(len(data)), committed-offset):]
	h.appendLocked(s, data)
	s.lastWrite = now
	if finish {
		h.finishLocked(s, now)
	} else if len(data) > 0 {
		s.signalLocked()
	}
	return s.end - s.base, nil
}

// writableLocked returns the stream w may write, creating an action's
// stream on its first write.
func (h *Hub) writableLocked(w Name, now time.Time) (*stream, error) {
	s := h.streams[w.Read()]
	if s == nil {
		if w.Created() {
			return nil, status.Errorf(codes.NotFound, "log stream %s does not exist (it was never created, or it ended more than %v ago); create one with CreateLogStream", w.Read(), h.opts.Keep)
		}
		if err := h.checkLease(w); err != nil {
			return nil, err
		}
		var err error
		if s, err = h.addLocked(w.Read(), now); err != nil {
			return nil, err
		}
	}
	if s.done {
		return nil, status.Errorf(codes.FailedPrecondition, "log stream %s is finished: its action ended, or its writer finished it; nothing more can be written", w.Read())
	}
	if w.Token == s.writer {
		return s, nil
	}
	if w.Created() || s.retired[w.Token] {
		return nil, status.Errorf(codes.PermissionDenied, "log stream %s is written by another writer; use the write_resource_name CreateLogStream returned", w.Read())
	}
	if err := h.checkLease(w); err != nil {
		return nil, err
	}
	if s.writer != "" {
		if s.retired == nil {
			s.retired = map[string]bool{}
		}
		s.retired[s.writer] = true
		h.appendLocked(s, []byte(restartNote))
	}
	s.writer, s.base = w.Token, s.end
	return s, nil
}

// checkLease refuses a worker that does not hold the action of w.
func (h *Hub) checkLease(w Name) error {
	if h.opts.LeaseHolds == nil || w.Created() {
		return nil
	}
	task, ok := taskOf(w.ID)
	if !ok {
		return status.Errorf(codes.InvalidArgument, "log stream %s is neither an action's stream ({task}.stdout, {task}.stderr) nor a created one; create one with CreateLogStream", w.Read())
	}
	if !h.opts.LeaseHolds(task, w.Token) {
		return status.Errorf(codes.FailedPrecondition, "log stream %s: lease %s does not hold the action (it ended or went to another worker); stop writing", w.Read(), w.Token)
	}
	return nil
}

// taskOf is the task of an action's stream id.
func taskOf(id string) (string, bool) {
	for _, which := range []string{Stdout, Stderr} {
		if len(id) > len(which)+1 && id[len(id)-len(which)-1:] == "."+which {
			return id[:len(id)-len(which)-1], true
		}
	}
	return "", false
}

// addLocked adds an empty stream, dropping expired ones first.
func (h *Hub) addLocked(name string, now time.Time) (*stream, error) {
	if len(h.streams) >= h.opts.MaxStreams {
		h.sweepLocked(now)
		h.evictFinishedLocked()
		if len(h.streams) >= h.opts.MaxStreams {
			return nil, status.Errorf(codes.ResourceExhausted, "this scheduler holds %d live output streams, its limit; live output of new actions resumes as streams end (the output is in the ActionResult anyway)", len(h.streams))
		}
	}
	s := &stream{lastWrite: now, changed: make(chan struct{})}
	h.streams[name] = s
	close(h.created)
	h.created = make(chan struct{})
	return s, nil
}

// appendLocked appends data, dropping the oldest bytes beyond Buffer.
func (h *Hub) appendLocked(s *stream, data []byte) {
	if len(data) == 0 {
		return
	}
	s.buf = append(s.buf, data...)
	s.end += int64(len(data))
	if over := len(s.buf) - h.opts.Buffer; over > 0 {
		// Copy down rather than reslice, so that the array stays
		// bounded.
		n := copy(s.buf, s.buf[over:])
		s.buf = s.buf[:n]
		s.start += int64(over)
	}
}

func (s *stream) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (h *Hub) finishLocked(s *stream, now time.Time) {
	if s.done {
		return
	}
	s.done, s.doneAt = true, now
	s.signalLocked()
}

// FinishTask ends the streams of task's action (it finished: whatever
// its worker still sends is not wanted), so that readers end.
func (h *Hub) FinishTask(instance, task string) {
	now := h.opts.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, which := range []string{Stdout, Stderr} {
		name := ForTask(instance, task, which).Read()
		if s := h.streams[name]; s != nil {
			h.finishLocked(s, now)
		} else if h.waiting[name] > 0 {
			// A reader waits for a stream that never came (an action
			// with no output): it ends, empty.
			if s, err := h.addLocked(name, now); err == nil {
				h.finishLocked(s, now)
			}
		}
	}
}

// Create adds a stream a client writes (CreateLogStream) and returns its
// name, with the write token.
func (h *Hub) Create(instance, id, token string) (Name, error) {
	n := Name{Instance: instance, ID: id, Token: token}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.createdLocked() >= h.opts.MaxStreams/4 {
		return Name{}, status.Errorf(codes.ResourceExhausted, "this scheduler holds %d streams made with CreateLogStream, its limit (a quarter of all streams, so that actions keep theirs); finish yours with finish_write, or retry later", h.opts.MaxStreams/4)
	}
	if h.streams[n.Read()] != nil {
		return Name{}, status.Errorf(codes.AlreadyExists, "log stream %s exists already; retry", n.Read())
	}
	s, err := h.addLocked(n.Read(), h.opts.Now())
	if err != nil {
		return Name{}, err
	}
	s.writer = token
	return n, nil
}

// createdLocked counts the streams made by Create (O(streams), as Create
// is rare).
func (h *Hub) createdLocked() int {
	n := 0
	for name := range h.streams {
		if r, err := ParseRead(name); err == nil && r.Created() {
			n++
		}
	}
	return n
}

// Follow sends the bytes of the stream named r from offset on (at most
// limit of them, 0: all) to send as they come, and returns when the
// stream is finished and sent, or ctx ends.
func (h *Hub) Follow(ctx context.Context, r Name, offset, limit int64, send func([]byte) error) error {
	if offset < 0 || limit < 0 {
		return status.Errorf(codes.InvalidArgument, "read_offset %d and read_limit %d must not be negative", offset, limit)
	}
	name := r.Read()
	pending := time.NewTimer(pendingWait)
	defer pending.Stop()
	var buf []byte
	for {
		h.mu.Lock()
		s := h.streams[name]
		if s == nil {
			created := h.created
			h.waiting[name]++
			h.mu.Unlock()
			var err error
			select {
			case <-created:
			case <-ctx.Done():
				err = status.FromContextError(ctx.Err()).Err()
			case <-pending.C:
				err = status.Errorf(codes.NotFound, "log stream %s did not appear within %v: its action has not written anything yet, or it is not a stream this scheduler knows; read its output from the ActionResult once the operation ends", name, pendingWait)
			}
			h.mu.Lock()
			if h.waiting[name]--; h.waiting[name] == 0 {
				delete(h.waiting, name)
			}
			h.mu.Unlock()
			if err != nil {
				return err
			}
			continue
		}
		if offset < s.start {
			start := s.start
			h.mu.Unlock()
			return status.Errorf(codes.OutOfRange, "log stream %s keeps its last %d bytes only; bytes before offset %d are gone: read from %d, or read the whole output from the ActionResult once the operation ends", name, h.opts.Buffer, start, start)
		}
		if offset > s.end && s.done {
			end := s.end
			h.mu.Unlock()
			return status.Errorf(codes.OutOfRange, "read_offset %d is past the end of log stream %s (%d bytes)", offset, name, end)
		}
		if offset < s.end {
			n := min(s.end-offset, chunkSize)
			if limit > 0 {
				n = min(n, limit)
			}
			from := offset - s.start
			buf = append(buf[:0], s.buf[from:from+n]...)
			h.mu.Unlock()
			if err := send(buf); err != nil {
				return err
			}
			offset += n
			if limit > 0 {
				if limit -= n; limit == 0 {
					return nil
				}
			}
			continue
		}
		done, changed := s.done, s.changed
		h.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// Run drops finished streams Keep after they ended, and ends streams
// nobody wrote for an hour, until ctx ends.
func (h *Hub) Run(ctx context.Context) {
	t := time.NewTicker(max(h.opts.Keep/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.mu.Lock()
			h.sweepLocked(h.opts.Now())
			h.mu.Unlock()
		}
	}
}

func (h *Hub) sweepLocked(now time.Time) {
	for name, s := range h.streams {
		switch {
		case s.done && now.Sub(s.doneAt) >= h.opts.Keep:
			delete(h.streams, name)
		case !s.done && now.Sub(s.lastWrite) >= idleFinish:
			h.finishLocked(s, now)
		}
	}
}

// evictFinishedLocked drops the finished stream that ended first, to
// make room: live streams matter more than finished ones, whose output
// is in the ActionResult.
func (h *Hub) evictFinishedLocked() {
	var oldest string
	var at time.Time
	for name, s := range h.streams {
		if s.done && (oldest == "" || s.doneAt.Before(at)) {
			oldest, at = name, s.doneAt
		}
	}
	if oldest != "" {
		delete(h.streams, oldest)
	}
}

// Len is the number of streams held (for metrics and tests).
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.streams)
}

// String describes the hub for logs.
func (h *Hub) String() string {
	return fmt.Sprintf("log streams (%d bytes each, kept %v)", h.opts.Buffer, h.opts.Keep)
}

// Tail returns up to max of the last bytes of the stream r names, the
// stream's length, and whether it is finished; ok is false when the hub
// does not hold it.
func (h *Hub) Tail(r Name, max int) (data []byte, end int64, done, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.streams[r.Read()]
	if s == nil {
		return nil, 0, false, false
	}
	from := len(s.buf) - min(max, len(s.buf))
	return append([]byte(nil), s.buf[from:]...), s.end, s.done, true
}
