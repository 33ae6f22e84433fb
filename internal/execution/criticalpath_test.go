package execution

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/gantry-build/gantry/internal/protocol"
)

// A critical path header that does not parse is logged and ignored: the
// action runs as without one.
func TestBadCriticalPathHeaderIsIgnored(t *testing.T) {
	e := newEnv(t)
	var logged bytes.Buffer
	e.svc.log = slog.New(slog.NewTextHandler(&logged, nil))
	w := e.worker("w1")
	for i, v := range []string{"abc", "-1", "1.5", strings.Repeat("9", 100)} {
		ad := e.action(emptyRoot(), simpleCmd("/bin/echo", v, string(rune('a'+i))))
		ctx := metadata.AppendToOutgoingContext(context.Background(), protocol.CriticalPathHeader, v)
		type answer struct {
			ops []*longrunningpb.Operation
			err error
		}
		done := make(chan answer, 1)
		go func() {
			ops, err := e.execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
			done <- answer{ops, err}
		}()
		a := w.poll()
		if a == nil {
			t.Fatalf("header %q: the action was not queued", v)
		}
		w.complete(a, &repb.ActionResult{}, codes.OK, "")
		got := <-done
		if got.err != nil || len(got.ops) == 0 || responseOf(t, got.ops[len(got.ops)-1]).GetStatus().GetCode() != 0 {
			t.Fatalf("header %q: Execute failed: %v %v", v, got.err, got.ops)
		}
	}
	if n := strings.Count(logged.String(), "ignoring the client's critical path estimate"); n != 4 {
		t.Errorf("%d warnings for 4 bad headers:\n%s", n, logged.String())
	}
}

func TestCriticalPathHeaderIsRead(t *testing.T) {
	s := &Service{log: slog.New(slog.DiscardHandler)}
	for v, want := range map[string]string{"1500": "1.5s", "0": "0s", "999999999999999": protocol.MaxCriticalPath.String()} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(protocol.CriticalPathHeader, v))
		if got := s.criticalPath(ctx).String(); got != want {
			t.Errorf("header %q: %s, want %s", v, got, want)
		}
	}
	if got := s.criticalPath(context.Background()); got != 0 {
		t.Errorf("without the header: %v", got)
	}
}
