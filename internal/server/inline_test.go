package server

import (
	"context"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/metadata"

	"github.com/gantry-build/gantry/internal/protocol"
)

// TestExecuteInlinesOutputsOnlyWhenAsked: Execute's result carries the
// output files' contents only for a caller that sends the
// gantry-inline-outputs header, for a run and for a cache hit; a plain
// REAPI caller (Bazel) gets digests only, and the stored result holds no
// contents.
func TestExecuteInlinesOutputsOnlyWhenAsked(t *testing.T) {
	f := startFarm(t, nil)
	ctx := context.Background()
	asking := metadata.AppendToOutgoingContext(ctx, protocol.InlineOutputsHeader, "1")
	root := f.put(&repb.Directory{})
	contents := func(resp *repb.ExecuteResponse) string {
		if resp.GetResult() == nil || len(resp.Result.OutputFiles) != 1 {
			t.Fatalf("response %v: want one output file", resp)
		}
		return string(resp.Result.OutputFiles[0].Contents)
	}
	plain := f.run(ctx, root, shCmd("echo plain > out", "out"))
	if got := contents(plain); got != "" {
		t.Errorf("a caller that did not ask got contents %q", got)
	}
	ran := f.run(asking, root, shCmd("echo asked > out", "out"))
	if got := contents(ran); got != "asked\n" || ran.CachedResult {
		t.Errorf("an executed action for a caller that asked: contents %q (cached %v), want \"asked\\n\"", got, ran.CachedResult)
	}
	hit := f.run(asking, root, shCmd("echo asked > out", "out"))
	if got := contents(hit); got != "asked\n" || !hit.CachedResult {
		t.Errorf("a cache hit for a caller that asked: contents %q (cached %v)", got, hit.CachedResult)
	}
	again := f.run(ctx, root, shCmd("echo asked > out", "out"))
	if got := contents(again); got != "" || !again.CachedResult {
		t.Errorf("the stored result, for a caller that did not ask: contents %q (cached %v)", got, again.CachedResult)
	}
}
