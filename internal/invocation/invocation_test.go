package invocation

import (
	"reflect"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/protocol"
)

func TestParseRoundTrips(t *testing.T) {
	for _, spec := range []string{"instance_name", "correlated_invocations_id", "tool_invocation_id", "user", "action_mnemonic", "target_id", "platform:container-image", "header:x-team"} {
		e, err := Parse(spec)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if e.String() != spec {
			t.Errorf("Parse(%q).String() = %q", spec, e.String())
		}
	}
	for _, bad := range []string{"", "instance", "platform:", "header:", "tool-invocation-id"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestKeys(t *testing.T) {
	rm, _ := proto.Marshal(&repb.RequestMetadata{ToolInvocationId: "t", CorrelatedInvocationsId: "c", ActionMnemonic: "m", TargetId: "//a:b"})
	md := metadata.Pairs(protocol.RequestMetadataHeader, string(rm), DefaultUserHeader, "alice", "x-team", "infra")
	r := &Request{Instance: "main", Platform: platform.Properties{{Name: "image", Value: "a"}, {Name: "image", Value: "b"}}}
	r.FromHeaders(md)
	ex, err := ParseAll([]string{"instance_name", "user", "header:X-Team", "correlated_invocations_id", "tool_invocation_id", "action_mnemonic", "target_id", "platform:image", "platform:none"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"main", "alice", "infra", "c", "t", "m", "//a:b", "a,b", ""}
	if got := Keys(ex, r); !reflect.DeepEqual(got, want) {
		t.Errorf("Keys = %q, want %q", got, want)
	}
	r.User = "authenticated"
	if got := Keys(ex[1:2], r); got[0] != "authenticated" {
		t.Errorf("user key %q, want the authenticated user over the header", got[0])
	}
	// A malformed RequestMetadata is ignored, not fatal.
	r2 := &Request{}
	r2.FromHeaders(metadata.Pairs(protocol.RequestMetadataHeader, "\xff\xff"))
	if r2.Metadata != nil || Keys(ex[4:5], r2)[0] != "" {
		t.Errorf("malformed metadata: %+v", r2.Metadata)
	}
	if Keys(nil, r) != nil {
		t.Error("no extractors should give no path")
	}
}
