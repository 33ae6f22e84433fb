package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/statestore"
)

// loadTasks returns the stored tasks in queue order and skips a task
// whose state record a cut-short flush never wrote; a corrupt record
// names itself.
func TestLoadTasks(t *testing.T) {
	ctx := context.Background()
	store := statestore.NewMemory()
	put := func(id string, seq int64, withState bool) {
		ms := []statestore.Mutation{{Kind: kindTask, Key: id, Value: (&taskRecord{ID: id}).marshal()}}
		if withState {
			ms = append(ms, statestore.Mutation{Kind: kindTaskState, Key: id, Value: (&taskStateRecord{Seq: seq}).marshal()})
		}
		if err := store.Apply(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	put("a", 3, true)
	put("b", 1, true)
	put("c", 2, false)
	put("d", 2, true)
	tasks, err := loadTasks(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range tasks {
		got = append(got, r.ID)
	}
	if strings.Join(got, ",") != "b,d,a" {
		t.Errorf("loaded %q, want b,d,a (queue order, c without its state skipped)", got)
	}
	if err := store.Apply(ctx, []statestore.Mutation{{Kind: kindTask, Key: "e", Value: []byte{0xff}}, {Kind: kindTaskState, Key: "e", Value: (&taskStateRecord{}).marshal()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTasks(ctx, store); err == nil || !strings.Contains(err.Error(), "task record e") {
		t.Errorf("a corrupt task record: %v, want an error naming it", err)
	}
}

// finishRestored keeps a finished operation with its unfinished task or
// the task its record keeps, and refuses one that does not say whose it
// is.
func TestFinishRestored(t *testing.T) {
	resp, _ := proto.Marshal(&repb.ExecuteResponse{Message: "done"})
	live := &Task{ID: "t1"}
	for _, tc := range []struct {
		name   string
		r      opRecord
		t      *Task
		wantOK bool
		wantID string
	}{
		{"its task still unfinished", opRecord{Task: "t1", Done: true, Response: resp}, live, true, "t1"},
		{"the task its record keeps", opRecord{Task: "t2", Done: true, Response: resp, Finished: &finishedTask{Instance: "main"}}, nil, true, "t2"},
		{"whose it is unknown", opRecord{Task: "t3", Done: true, Response: resp}, nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := &Operation{Name: "op"}
			ok, err := finishRestored(op, &tc.r, tc.t)
			if err != nil || ok != tc.wantOK {
				t.Fatalf("finishRestored = %v, %v; want %v", ok, err, tc.wantOK)
			}
			if ok && (op.task.ID != tc.wantID || !op.done || op.response.GetMessage() != "done") {
				t.Errorf("op task %q done %v response %v", op.task.ID, op.done, op.response)
			}
		})
	}
	if _, err := finishRestored(&Operation{}, &opRecord{Done: true, Response: []byte{0xff}}, nil); err == nil {
		t.Error("a corrupt response restored without an error")
	}
}

// A corrupt operation record, or the corrupt metadata of an unfinished
// operation, stops the restore with an error naming it; the metadata of
// a finished one is never decoded, so it cannot.
func TestRestoreNamesACorruptRecord(t *testing.T) {
	ctx := context.Background()
	done, _ := proto.Marshal(&repb.ExecuteResponse{})
	open := (&opRecord{Task: "t1"}).marshal()
	finished := (&opRecord{Task: "t2", Done: true, Response: done, Finished: &finishedTask{Instance: "main"}}).marshal()
	for _, tc := range []struct {
		name string
		ms   []statestore.Mutation
		want string
	}{
		{"operation record", []statestore.Mutation{{Kind: kindOp, Key: "op-bad", Value: []byte{0xff}}}, "operation record op-bad"},
		{"unfinished operation's metadata", []statestore.Mutation{{Kind: kindOp, Key: "op-open", Value: open}, {Kind: kindOpMeta, Key: "op-open", Value: []byte{0xff}}}, "operation metadata record op-open"},
		{"finished operation's metadata", []statestore.Mutation{{Kind: kindOp, Key: "op-done", Value: finished}, {Kind: kindOpMeta, Key: "op-done", Value: []byte{0xff}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := statestore.NewMemory()
			ms := append([]statestore.Mutation{{Kind: kindTask, Key: "t1", Value: (&taskRecord{ID: "t1"}).marshal()}, {Kind: kindTaskState, Key: "t1", Value: (&taskStateRecord{Seq: 1}).marshal()}}, tc.ms...)
			if err := store.Apply(ctx, ms); err != nil {
				t.Fatal(err)
			}
			s := New(Config{HeartbeatTimeout: 10 * time.Second, CallerGrace: time.Hour, MaxAttempts: 3, Retention: time.Hour}, &fakeClock{now: time.Unix(1_700_000_000, 0)}, nil)
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			err := s.Attach(actx, store)
			if err == nil {
				defer func() { cancel(); <-s.Stopped() }()
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("restore: %v", err)
				}
				if st := s.Stats(); st.Operations != 1 {
					t.Errorf("restored %d operations, want 1", st.Operations)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("restore: %v, want an error naming the %s", err, tc.want)
			}
		})
	}
}
