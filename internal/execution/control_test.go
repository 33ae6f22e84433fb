package execution

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/testutil"
)

// logLines returns the JSON log lines written to s, parsed, and forgets
// them.
func logLines(t *testing.T, s *testutil.SyncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.Take()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestControlsAreLogged: every control writes one log line, "admin
// control" when done and "admin control refused" (with the reason) when
// not, naming who asked and the target.
func TestControlsAreLogged(t *testing.T) {
	sched := scheduler.New(scheduler.Config{}, nil, nil)
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w1", Platform: platform.Worker{Cores: 1}})
	var out testutil.SyncBuffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	store := &failingStore{}
	s := NewAdminService(sched, nil, store, nil, log)
	ctx := WithActor(context.Background(), "tester")
	wreq := func(id string) *adminpb.WorkerControlRequest {
		return &adminpb.WorkerControlRequest{WorkerId: id, Reason: "why " + id}
	}
	failSave := errors.New("disk full")
	for _, c := range []struct {
		name string
		call func() error
		want map[string]any
	}{
		{"drain", func() error { _, err := s.DrainWorker(ctx, wreq("w1")); return err },
			map[string]any{"msg": "admin control", "control": "drain", "worker": "w1", "by": "tester", "reason": "why w1", "drain": true}},
		{"unknown worker", func() error { _, err := s.PauseWorker(ctx, wreq("ghost")); return err },
			map[string]any{"msg": "admin control refused", "control": "pause", "worker": "ghost", "by": "tester", "reason": "why ghost", "err": "ghost"}},
		{"no worker", func() error { _, err := s.TerminateWorker(ctx, wreq("")); return err },
			map[string]any{"msg": "admin control refused", "control": "terminate", "worker": "", "by": "tester", "err": "worker_id is empty"}},
		{"store fails", func() error {
			store.err = failSave
			defer func() { store.err = nil }()
			_, err := s.UndrainWorker(ctx, wreq("w1"))
			return err
		}, map[string]any{"msg": "admin control refused", "control": "undrain", "worker": "w1", "by": "tester", "err": "disk full"}},
		{"unknown operation", func() error {
			_, err := s.KillOperation(ctx, &adminpb.KillOperationRequest{Name: "nope", Reason: "stuck"})
			return err
		}, map[string]any{"msg": "admin control refused", "control": "kill", "operation": "nope", "reason": "stuck", "by": "tester", "err": `operation "nope" is not known`}},
		{"no config", func() error { _, err := s.ReloadConfig(ctx, &adminpb.ReloadConfigRequest{}); return err },
			map[string]any{"msg": "admin control refused", "control": "reload", "by": "tester", "err": "started without --config"}},
		{"bad config", func() error {
			s := NewAdminService(sched, nil, store, func() error { return errors.New("line 3: bad yaml") }, log)
			_, err := s.ReloadConfig(ctx, &adminpb.ReloadConfigRequest{})
			return err
		}, map[string]any{"msg": "admin control refused", "control": "reload", "by": "tester", "err": "line 3: bad yaml"}},
		{"reload", func() error {
			s := NewAdminService(sched, nil, store, func() error { return nil }, log)
			_, err := s.ReloadConfig(ctx, &adminpb.ReloadConfigRequest{})
			return err
		}, map[string]any{"msg": "admin control", "control": "reload", "by": "tester"}},
	} {
		err := c.call()
		if (c.want["msg"] == "admin control") != (err == nil) {
			t.Errorf("%s: %v", c.name, err)
		}
		lines := logLines(t, &out)
		if len(lines) != 1 {
			t.Errorf("%s: %d log lines, want 1: %v", c.name, len(lines), lines)
			continue
		}
		for k, v := range c.want {
			got := lines[0][k]
			if s, ok := v.(string); ok && k == "err" {
				if g, _ := got.(string); !strings.Contains(g, s) {
					t.Errorf("%s: %s = %v, want it to contain %q", c.name, k, got, s)
				}
			} else if got != v {
				t.Errorf("%s: %s = %v, want %v (line %v)", c.name, k, got, v, lines[0])
			}
		}
	}
	if c := sched.WorkerControlOf("w1"); !c.Drain {
		t.Errorf("a control whose storing failed was kept or the drain lost: %+v", c)
	}

	// Controls refused by authorization never reach the service: the
	// interceptor logs them, and nothing else.
	icpt := LogRefusedControls(log)
	denied := func(context.Context, any) (any, error) {
		return nil, status.Error(codes.PermissionDenied, "token:eve lacks permission admin")
	}
	notFound := func(context.Context, any) (any, error) { return nil, status.Error(codes.NotFound, "gone") }
	info := func(m string) *grpc.UnaryServerInfo {
		return &grpc.UnaryServerInfo{FullMethod: "/gantry.admin.v1.Admin/" + m}
	}
	icpt(ctx, wreq("w1"), info("DrainWorker"), denied)
	icpt(ctx, &adminpb.KillOperationRequest{Name: "op-1"}, info("KillOperation"), denied)
	icpt(ctx, &adminpb.ListWorkersRequest{}, info("ListWorkers"), denied) // not a control
	icpt(ctx, wreq("w1"), info("DrainWorker"), notFound)                  // the service logs it
	lines := logLines(t, &out)
	if len(lines) != 2 {
		t.Fatalf("interceptor: %d lines, want 2: %v", len(lines), lines)
	}
	for i, want := range []map[string]any{
		{"msg": "admin control refused", "control": "drain", "worker": "w1", "by": "tester", "err": "token:eve lacks permission admin"},
		{"msg": "admin control refused", "control": "kill", "operation": "op-1", "by": "tester", "err": "token:eve lacks permission admin"},
	} {
		for k, v := range want {
			if lines[i][k] != v {
				t.Errorf("interceptor line %d: %s = %v, want %v", i, k, lines[i][k], v)
			}
		}
	}
}

// failingStore is an AdminStore that fails with err when it is set.
type failingStore struct{ err error }

func (f *failingStore) SaveQuotas([]scheduler.Quota) error { return f.err }

func (f *failingStore) SaveWorkerControls(map[string]scheduler.WorkerControl) error { return f.err }
