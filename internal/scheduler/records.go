package scheduler

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

// The scheduler's records in the state store are binary: a version byte
// (recordV1), then the fields in a fixed order, each an unsigned or signed
// varint, or a uvarint length and that many bytes; a time is a varint of
// Unix nanoseconds, with 0 meaning the zero time. Stores written before
// the binary encoding hold JSON objects, which always start with '{'; they
// are still read, so an existing data directory restores.
//
//	task:   id, instance, function, hash, size, properties (count, then
//	        name and value of each), action, command, cacheable (0/1),
//	        queue, queued_at, and from version 2 on shape (0/1) and,
//	        when 1, its id, label, longest first (0/1), client timeout
//	        and critical path
//	tstate: priority, seq, attempts, invocation (count, then each), lease,
//	        worker,
//	        and from version 2 on retries (count, then at, worker, kind
//	        and reason of each), last worker
//	op:     task, done (0/1), response, done_at, and from version 2 on
//	        accepted, invocation (count, then each), and from version 3
//	        on finished (0/1) and, when 1, the finished task: instance,
//	        function, hash, size, queue, properties, queued_at, priority,
//	        attempts, worker, invocation, retries
//	opmeta: the operation's RequestMetadata, protobuf-encoded
//
// Operation records are written as version 3 (recordOpV3), task state
// records as version 2 (recordStateV2), task records as version 2
// (recordTaskV2) when the task has a shape, else 1; records of the older versions
// still decode, without the fields added since.
const recordV1 = 1

// recordOpV2 is the version of operation records that carry the
// operation's acceptance time and invocation path.
const recordOpV2 = 2

// recordOpV3 is the version of operation records that carry, for a
// finished operation, its instance and action and what the status pages
// show of its task.
const recordOpV3 = 3

// recordStateV2 is the version of task state records that carry the
// task's retries and last worker.
const recordStateV2 = 2

// errRecord is wrapped by every decoding error.
var errRecord = errors.New("malformed scheduler record")

type recWriter []byte

func (w *recWriter) uint(v uint64)  { *w = binary.AppendUvarint(*w, v) }
func (w *recWriter) int(v int64)    { *w = binary.AppendVarint(*w, v) }
func (w *recWriter) bytes(b []byte) { w.uint(uint64(len(b))); *w = append(*w, b...) }
func (w *recWriter) str(s string)   { w.uint(uint64(len(s))); *w = append(*w, s...) }
func (w *recWriter) bool(b bool) {
	if b {
		*w = append(*w, 1)
	} else {
		*w = append(*w, 0)
	}
}
func (w *recWriter) time(t time.Time) {
	if t.IsZero() {
		w.int(0)
		return
	}
	w.int(t.UnixNano())
}

type recReader struct {
	b   []byte
	err error
}

func (r *recReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: bad %s", errRecord, what)
	}
}

func (r *recReader) uint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recReader) int(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recReader) int32(what string) int32 {
	v := r.int(what)
	if int64(int32(v)) != v {
		r.fail(what)
		return 0
	}
	return int32(v)
}

// bytes returns a copy (nil when empty), so records do not alias the
// store's buffer.
func (r *recReader) bytes(what string) []byte {
	l := r.uint(what)
	if r.err != nil {
		return nil
	}
	if l > uint64(len(r.b)) {
		r.fail(what)
		return nil
	}
	var v []byte
	if l > 0 {
		v = append([]byte(nil), r.b[:l]...)
	}
	r.b = r.b[l:]
	return v
}

func (r *recReader) str(what string) string {
	l := r.uint(what)
	if r.err != nil {
		return ""
	}
	if l > uint64(len(r.b)) {
		r.fail(what)
		return ""
	}
	s := string(r.b[:l])
	r.b = r.b[l:]
	return s
}

func (r *recReader) bool(what string) bool {
	if r.err != nil {
		return false
	}
	if len(r.b) == 0 || r.b[0] > 1 {
		r.fail(what)
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

func (r *recReader) time(what string) time.Time {
	ns := r.int(what)
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// count reads a list length, bounded by the bytes left (each element
// takes at least min bytes), so a damaged count cannot allocate much.
func (r *recReader) count(what string, min int) int {
	n := r.uint(what)
	if r.err == nil && n > uint64(len(r.b)/min) {
		r.fail(what)
		return 0
	}
	return int(n)
}

// start checks the version byte is recordV1; json reports an old JSON
// record.
func (r *recReader) start(what string) (json bool) {
	json, _ = r.startUpTo(what, recordV1)
	return json
}

// startUpTo checks the version byte is from recordV1 to newest and
// returns it; json reports an old JSON record.
func (r *recReader) startUpTo(what string, newest byte) (json bool, version byte) {
	if len(r.b) > 0 && r.b[0] == '{' {
		return true, 0
	}
	if len(r.b) == 0 || r.b[0] < recordV1 || r.b[0] > newest {
		r.err = fmt.Errorf("%w: %s record has an unknown version (written by a newer Gantry?)", errRecord, what)
		return false, 0
	}
	version = r.b[0]
	r.b = r.b[1:]
	return false, version
}

func (r *recReader) end(what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: trailing bytes after the %s record", errRecord, what)
	}
	return r.err
}

func (rec *taskRecord) marshal() []byte {
	b, _, _ := rec.marshalSharing()
	return b
}

// marshalSharing encodes rec and returns, besides, its Action and Command
// bytes as they lie in the encoding (nil when empty): a task that keeps
// those instead of its own shares them with the record being stored.
func (rec *taskRecord) marshalSharing() (b, action, command []byte) {
	// Sized to fit: the durable store may keep the record for as long as
	// the task is queued, so a buffer grown by doubling would keep up to
	// twice its bytes.
	n := 64 + strSize(rec.ID) + strSize(rec.Instance) + strSize(rec.Hash) + strSize(rec.Queue) + 6 + len(rec.Action) + len(rec.Command)
	for _, p := range rec.Platform {
		n += strSize(p.Name) + strSize(p.Value)
	}
	version := byte(recordV1)
	if rec.Shape != nil {
		n += rec.Shape.size()
		version = recordTaskV2
	}
	w := make(recWriter, 0, n)
	w = append(w, version)
	w.str(rec.ID)
	w.str(rec.Instance)
	w.int(int64(rec.Function))
	w.str(rec.Hash)
	w.int(rec.Size)
	w.uint(uint64(len(rec.Platform)))
	for _, p := range rec.Platform {
		w.str(p.Name)
		w.str(p.Value)
	}
	w.bytes(rec.Action)
	aEnd := len(w)
	w.bytes(rec.Command)
	cEnd := len(w)
	w.bool(rec.Cacheable)
	w.str(rec.Queue)
	w.time(rec.QueuedAt)
	if rec.Shape != nil {
		w.bool(true)
		rec.Shape.write(&w)
	}
	if len(rec.Action) > 0 {
		action = w[aEnd-len(rec.Action) : aEnd : aEnd]
	}
	if len(rec.Command) > 0 {
		command = w[cEnd-len(rec.Command) : cEnd : cEnd]
	}
	return w, action, command
}

func (rec *taskRecord) unmarshal(b []byte) error {
	r := recReader{b: b}
	isJSON, version := r.startUpTo("task", recordTaskV2)
	if isJSON {
		return json.Unmarshal(b, rec)
	}
	rec.ID = r.str("id")
	rec.Instance = r.str("instance")
	rec.Function = r.int32("digest function")
	rec.Hash = r.str("hash")
	rec.Size = r.int("size")
	if n := r.count("platform", 2); n > 0 {
		rec.Platform = make(platform.Properties, n)
		for i := range rec.Platform {
			rec.Platform[i] = platform.Property{Name: r.str("property name"), Value: r.str("property value")}
		}
	}
	rec.Action = r.bytes("action")
	rec.Command = r.bytes("command")
	rec.Cacheable = r.bool("cacheable")
	rec.Queue = r.str("queue")
	rec.QueuedAt = r.time("queued_at")
	if version >= recordTaskV2 && r.bool("shape") {
		rec.Shape = readShapeRecord(&r)
	}
	return r.end("task")
}

func (rec *taskStateRecord) marshal() []byte {
	w := make(recWriter, 0, 32+strsSize(rec.Invocation)+strSize(rec.Lease)+strSize(rec.Worker)+strSize(rec.LastWorker)+retriesSize(rec.Retries))
	w = append(w, recordStateV2)
	w.int(int64(rec.Priority))
	w.int(rec.Seq)
	w.uint(uint64(rec.Attempts))
	w.uint(uint64(len(rec.Invocation)))
	for _, s := range rec.Invocation {
		w.str(s)
	}
	w.str(rec.Lease)
	w.str(rec.Worker)
	w.retries(rec.Retries)
	w.str(rec.LastWorker)
	return w
}

// strSize is at most what w.str(s) appends (for s below 2 MiB).
func strSize(s string) int { return 3 + len(s) }

// strsSize is at most what w.strs(ss) appends.
func strsSize(ss []string) int {
	n := binary.MaxVarintLen64
	for _, s := range ss {
		n += strSize(s)
	}
	return n
}

// retriesSize is about what w.retries(rs) appends.
func retriesSize(rs []Retry) int {
	n := binary.MaxVarintLen64
	for _, r := range rs {
		n += 32 + len(r.Worker) + len(r.Reason)
	}
	return n
}

func (w *recWriter) strs(ss []string) {
	w.uint(uint64(len(ss)))
	for _, s := range ss {
		w.str(s)
	}
}

func (w *recWriter) retries(rs []Retry) {
	w.uint(uint64(len(rs)))
	for _, r := range rs {
		w.time(r.At)
		w.str(r.Worker)
		w.str(string(r.Kind))
		w.str(r.Reason)
	}
}

func (r *recReader) strs(what string) []string {
	n := r.count(what, 1)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.str(what)
	}
	return out
}

func (r *recReader) retries() []Retry {
	n := r.count("retries", 4)
	if n == 0 {
		return nil
	}
	out := make([]Retry, n)
	for i := range out {
		out[i] = Retry{At: r.time("retry time"), Worker: r.str("retry worker"), Kind: RetryKind(r.str("retry kind")), Reason: r.str("retry reason")}
	}
	return out
}

func (r *recReader) properties() platform.Properties {
	n := r.count("platform", 2)
	if n == 0 {
		return nil
	}
	ps := make(platform.Properties, n)
	for i := range ps {
		ps[i] = platform.Property{Name: r.str("property name"), Value: r.str("property value")}
	}
	return ps
}

func (rec *taskStateRecord) unmarshal(b []byte) error {
	r := recReader{b: b}
	isJSON, version := r.startUpTo("task state", recordStateV2)
	if isJSON {
		return json.Unmarshal(b, rec)
	}
	rec.Priority = r.int32("priority")
	rec.Seq = r.int("seq")
	a := r.uint("attempts")
	if a > 1<<31 {
		r.fail("attempts")
	}
	rec.Attempts = int(a)
	if n := r.count("invocation", 1); n > 0 {
		rec.Invocation = make([]string, n)
		for i := range rec.Invocation {
			rec.Invocation[i] = r.str("invocation")
		}
	}
	rec.Lease = r.str("lease")
	rec.Worker = r.str("worker")
	if version >= recordStateV2 {
		rec.Retries = r.retries()
		rec.LastWorker = r.str("last worker")
	}
	return r.end("task state")
}

func (rec *opRecord) marshal() []byte {
	n := 64 + strSize(rec.Task) + 3 + len(rec.Response) + strsSize(rec.Invocation)
	f := rec.Finished
	if f != nil {
		n += 160 + strSize(f.Instance) + strSize(f.Hash)
	}
	w := make(recWriter, 0, n)
	w = append(w, recordOpV3)
	w.str(rec.Task)
	w.bool(rec.Done)
	w.bytes(rec.Response)
	w.time(rec.DoneAt)
	w.time(rec.Accepted)
	w.strs(rec.Invocation)
	w.bool(f != nil)
	if f != nil {
		w.str(f.Instance)
		w.int(int64(f.Function))
		w.str(f.Hash)
		w.int(f.Size)
		w.str(f.Queue)
		w.uint(uint64(len(f.Platform)))
		for _, p := range f.Platform {
			w.str(p.Name)
			w.str(p.Value)
		}
		w.time(f.QueuedAt)
		w.int(int64(f.Priority))
		w.uint(uint64(f.Attempts))
		w.str(f.Worker)
		w.strs(f.Invocation)
		w.retries(f.Retries)
	}
	return w
}

func (rec *opRecord) unmarshal(b []byte) error {
	r := recReader{b: b}
	isJSON, version := r.startUpTo("operation", recordOpV3)
	if isJSON {
		return json.Unmarshal(b, rec)
	}
	rec.Task = r.str("task")
	rec.Done = r.bool("done")
	rec.Response = r.bytes("response")
	rec.DoneAt = r.time("done_at")
	if version >= recordOpV2 {
		rec.Accepted = r.time("accepted")
		rec.Invocation = r.strs("invocation")
	}
	if version >= recordOpV3 {
		if r.bool("finished") {
			f := &finishedTask{Instance: r.str("instance"), Function: r.int32("digest function"), Hash: r.str("hash"), Size: r.int("size"),
				Queue: r.str("queue"), Platform: r.properties(), QueuedAt: r.time("queued_at"), Priority: r.int32("priority")}
			a := r.uint("attempts")
			if a > 1<<31 {
				r.fail("attempts")
			}
			f.Attempts = int(a)
			f.Worker = r.str("worker")
			f.Invocation = r.strs("invocation")
			f.Retries = r.retries()
			rec.Finished = f
		}
	}
	return r.end("operation")
}

// peekOp reads an operation record's task and done fields without
// decoding the rest (task aliases b). ok is false for a record it cannot
// read that way (JSON, or damaged): decode that one whole.
func peekOp(b []byte) (task []byte, done bool, ok bool) {
	if len(b) == 0 || b[0] < recordV1 || b[0] > recordOpV3 {
		return nil, false, false
	}
	b = b[1:]
	l, n := binary.Uvarint(b)
	if n <= 0 || l >= uint64(len(b)-n) {
		return nil, false, false
	}
	task, b = b[n:n+int(l)], b[n+int(l):]
	if b[0] > 1 {
		return nil, false, false
	}
	return task, b[0] == 1, true
}
