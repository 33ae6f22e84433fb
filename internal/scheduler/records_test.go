package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

func sampleRecords() (taskRecord, taskStateRecord, opRecord) {
	at := time.Unix(1_700_000_000, 123456789).UTC()
	return taskRecord{ID: "t1", Instance: "main", Function: 1, Hash: "abc", Size: 142,
			Platform: platform.Properties{{Name: "OSFamily", Value: "linux"}, {Name: "pool", Value: "*"}},
			Action:   []byte{1, 2, 0, 3}, Command: []byte("cmd"), Cacheable: true, Queue: "q", QueuedAt: at},
		taskStateRecord{Priority: -3, Seq: -7, Attempts: 2, Invocation: []string{"u", "inv"}, Lease: "l1", Worker: "w1",
			Retries: []Retry{{At: at, Worker: "w0", Kind: RetryWorkerLost, Reason: "gone"}}, LastWorker: "w1"},
		opRecord{Task: "t1", Done: true, Response: []byte{9, 9}, DoneAt: at.Add(time.Second), Accepted: at.Add(-time.Second), Invocation: []string{"u", "inv", "x"},
			Finished: &finishedTask{Instance: "team-z", Function: 1, Hash: "abc", Size: 142, Queue: "q", Platform: platform.Properties{{Name: "OSFamily", Value: "linux"}}, QueuedAt: at, Priority: -2, Attempts: 3,
				Worker: "w9", Invocation: []string{"u"}, Retries: []Retry{{At: at, Worker: "w8", Kind: RetryPreempted, Reason: "quota"}, {Worker: "w9", Kind: RetrySuspended}}}}
}

// legacy is rec without the fields JSON records (the oldest format)
// never had.
func legacy(rec any) any {
	switch r := rec.(type) {
	case *taskStateRecord:
		c := *r
		c.Retries, c.LastWorker = nil, ""
		return &c
	case *opRecord:
		c := *r
		c.Finished = nil
		return &c
	}
	return rec
}

func TestRecordsRoundTripBinaryAndJSON(t *testing.T) {
	task, st, op := sampleRecords()
	empty := [3]any{&taskRecord{}, &taskStateRecord{}, &opRecord{}}
	for i, rec := range []interface{ marshal() []byte }{&task, &st, &op} {
		bin := rec.marshal()
		if bin[0] != recordV1 && bin[0] != recordStateV2 && bin[0] != recordOpV3 {
			t.Fatalf("%T: version byte %d", rec, bin[0])
		}
		js, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		for j, enc := range [][]byte{bin, js} {
			want := any(rec)
			if j == 1 {
				want = legacy(rec)
			}
			got := reflect.New(reflect.TypeOf(empty[i]).Elem()).Interface().(interface{ unmarshal([]byte) error })
			if err := got.unmarshal(enc); err != nil {
				t.Fatalf("%T from %q: %v", rec, enc, err)
			}
			if !reflect.DeepEqual(normTimes(got), normTimes(want)) {
				t.Errorf("%T from %q:\n got %+v\nwant %+v", rec, enc, got, want)
			}
		}
		// Every shorter prefix and a longer record are refused.
		for n := 0; n < len(bin); n++ {
			got := reflect.New(reflect.TypeOf(empty[i]).Elem()).Interface().(interface{ unmarshal([]byte) error })
			if err := got.unmarshal(bin[:n]); !errors.Is(err, errRecord) {
				t.Errorf("%T: %d of %d bytes decoded: %v", rec, n, len(bin), err)
			}
		}
		got := reflect.New(reflect.TypeOf(empty[i]).Elem()).Interface().(interface{ unmarshal([]byte) error })
		if err := got.unmarshal(append(bin, 0)); !errors.Is(err, errRecord) {
			t.Errorf("%T with a trailing byte: %v", rec, err)
		}
		bad := append([]byte{recordOpV3 + 1}, bin[1:]...)
		if err := got.unmarshal(bad); !errors.Is(err, errRecord) {
			t.Errorf("%T with version %d: %v", rec, bad[0], err)
		}
	}
}

// normTimes makes times comparable with reflect.DeepEqual (JSON keeps the
// location, binary records give UTC).
func normTimes(v any) any {
	switch r := v.(type) {
	case *taskRecord:
		c := *r
		c.QueuedAt = c.QueuedAt.UTC()
		return c
	case *opRecord:
		c := *r
		c.DoneAt, c.Accepted = c.DoneAt.UTC(), c.Accepted.UTC()
		return c
	case *taskStateRecord:
		return *r
	}
	return v
}

// A store written before the binary records (JSON values) restores.
func TestRestoreFromJSONRecords(t *testing.T) {
	store := statestore.NewMemory()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	ad := action("old")
	queued := taskRecord{ID: "tq", Instance: "main", Function: int32(ad.Function), Hash: ad.Hash, Size: ad.Size, Cacheable: true, QueuedAt: clk.now}
	resp, _ := proto.Marshal(&repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 3}})
	var batch []statestore.Mutation
	put := func(kind, key string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, statestore.Mutation{Kind: kind, Key: key, Value: b})
	}
	put(kindTask, "tq", queued)
	put(kindTaskState, "tq", taskStateRecord{Seq: 1, Attempts: 0})
	put(kindOp, "op-queued", opRecord{Task: "tq"})
	put(kindOp, "op-done", opRecord{Task: "tgone", Done: true, Response: resp, DoneAt: clk.now})
	if err := store.Apply(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	s, stop := durableTest(t, store, clk)
	defer stop()
	// The finished operation's record does not say whose it was (its
	// task is gone): it is not restored, so nobody gets it as the
	// default instance's.
	if st := s.Stats(); st.Queued != 1 || st.Operations != 1 {
		t.Fatalf("restored %+v, want 1 queued and 1 operation", st)
	}
	if _, _, err := s.Watch("op-done"); !errors.Is(err, ErrNotFound) {
		t.Errorf("finished operation of unknown instance from a JSON record: %v, want ErrNotFound", err)
	}
	register(s, "w")
	if a := pollNow(t, s, "w", 1); a == nil || a.Task.ActionDigest != ad {
		t.Fatalf("queued task from a JSON record: %+v", a)
	}
	// What is written now is binary.
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	store.Load(context.Background(), kindTaskState, func(key string, v []byte) error {
		if v[0] != recordStateV2 {
			t.Errorf("task state %s rewritten as %q, want a binary record", key, v)
		}
		return nil
	})
}

func FuzzSchedulerRecords(f *testing.F) {
	task, st, op := sampleRecords()
	for _, rec := range []interface{ marshal() []byte }{&task, &st, &op} {
		f.Add(rec.marshal())
		js, _ := json.Marshal(rec)
		f.Add(js)
	}
	f.Add([]byte{recordV1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	task.Shape = &taskShapeRecord{ID: "k", Label: "l", Longest: true, Client: time.Hour, Tail: time.Second}
	f.Add(task.marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		// peekOp agrees with a whole decode wherever that succeeds (a
		// restart leaves finished records undecoded on its word).
		var op opRecord
		if task, done, ok := peekOp(b); ok && op.unmarshal(b) == nil && (string(task) != op.Task || done != op.Done) {
			t.Fatalf("peekOp = %q, %v; the record decodes to %q, %v", task, done, op.Task, op.Done)
		}
		for _, rec := range []interface {
			marshal() []byte
			unmarshal([]byte) error
		}{&taskRecord{}, &taskStateRecord{}, &opRecord{}} {
			if err := rec.unmarshal(b); err != nil || len(b) == 0 || b[0] < recordV1 || b[0] > recordOpV3 {
				continue
			}
			// What decodes encodes back to the same bytes, except a
			// time of 0 (the zero time) and a varint of a longer form.
			again := rec.marshal()
			dec := reflect.New(reflect.TypeOf(rec).Elem()).Interface().(interface{ unmarshal([]byte) error })
			if err := dec.unmarshal(again); err != nil {
				t.Fatalf("%T: re-encoded record does not decode: %v", rec, err)
			}
			if !bytes.Equal(dec.(interface{ marshal() []byte }).marshal(), again) {
				t.Fatalf("%T: encoding is not stable", rec)
			}
		}
	})
}

// peekOp reads an operation record's task and done fields, and declines
// (for a whole decode) what it cannot read so.
func TestPeekOp(t *testing.T) {
	_, _, op := sampleRecords()
	open := op
	open.Done, open.Response, open.Finished = false, nil, nil
	js, _ := json.Marshal(&op)
	for _, tc := range []struct {
		name     string
		b        []byte
		task     string
		done, ok bool
	}{
		{"finished", op.marshal(), "t1", true, true},
		{"unfinished", open.marshal(), "t1", false, true},
		{"JSON", js, "", false, false},
		{"empty", nil, "", false, false},
		{"task cut short", []byte{recordOpV3, 5, 't'}, "", false, false},
		{"no done field", []byte{recordOpV3, 1, 't'}, "", false, false},
		{"done not 0 or 1", []byte{recordOpV3, 1, 't', 7}, "", false, false},
	} {
		task, done, ok := peekOp(tc.b)
		if string(task) != tc.task || done != tc.done || ok != tc.ok {
			t.Errorf("%s: peekOp = %q, %v, %v; want %q, %v, %v", tc.name, task, done, ok, tc.task, tc.done, tc.ok)
		}
	}
}

// TestRecordsAreSizedToFit: a queued task's records may be kept by the
// durable store for as long as it is queued, so their buffers are not
// grown by doubling: realistic records (a 64-character hash, platform
// properties, an invocation path) have little spare capacity.
func TestRecordsAreSizedToFit(t *testing.T) {
	task, st, op := sampleRecords()
	task.ID, task.Hash = "x1b2c3d4e5f6-9z", strings.Repeat("ab", 32)
	task.Platform = platform.Properties{{Name: "OSFamily", Value: "linux"}, {Name: "container-image", Value: "docker://example.org/build/toolchain:2026-11"}, {Name: "pool", Value: "large"}}
	task.Action, task.Command = make([]byte, 140), make([]byte, 300)
	inv := []string{"tenant-17", "8b0f3c1e-5a2d-4c6b-9e7f-0a1b2c3d4e5f", "u-someone"}
	st.Invocation, op.Invocation, op.Done, op.Finished, op.Response = inv, inv, false, nil, nil
	for _, rec := range []interface{ marshal() []byte }{&task, &st, &op} {
		b := rec.marshal()
		if spare := cap(b) - len(b); spare > 128 {
			t.Errorf("%T: %d bytes in a buffer of %d: %d spare, want at most 128", rec, len(b), cap(b), spare)
		}
	}
}
