package server

import (
	"context"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/history"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/statestore"
)

// BenchmarkBuildTraffic is what the interceptor adds to a batch read:
// with a build's RequestMetadata (decoded, counted, added to the
// history) and without one (a look at the headers).
func BenchmarkBuildTraffic(b *testing.B) {
	hist, err := history.New(context.Background(), statestore.NewMemory(), history.Options{MaxOperations: 10, MaxBuilds: 10}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer hist.Close()
	bt := buildTraffic{hist: hist}
	md, _ := proto.Marshal(&repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: "bazel", ToolVersion: "7.4.1"},
		ActionId: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ToolInvocationId: "3f1b2c4d-0000-4000-8000-00000000e2e1",
		CorrelatedInvocationsId: "9a8b7c6d-0000-4000-8000-000000000001", ActionMnemonic: "CppCompile", TargetId: "//app:lib"})
	resp := &repb.BatchReadBlobsResponse{Responses: []*repb.BatchReadBlobsResponse_Response{{Data: make([]byte, 4096)}}}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	info := &grpc.UnaryServerInfo{FullMethod: methodBatchReadBlobs}
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{
		{"build", metadata.NewIncomingContext(context.Background(), metadata.Pairs(protocol.RequestMetadataHeader, string(md)))},
		{"anonymous", metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", "grpc-go"))},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bt.unary(c.ctx, nil, info, handler)
			}
		})
	}
}
