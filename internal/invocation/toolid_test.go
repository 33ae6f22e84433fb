package invocation

import (
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
)

// ToolInvocationIDOf reads the field as a decode of the message does,
// whatever else the message holds, and gives "" for a malformed one.
func TestToolInvocationIDOf(t *testing.T) {
	for _, m := range []*repb.RequestMetadata{
		{},
		{ToolInvocationId: "inv-1"},
		{ToolDetails: &repb.ToolDetails{ToolName: "bazel", ToolVersion: "7.4.1"}, ActionId: "a", ToolInvocationId: "inv-2", CorrelatedInvocationsId: "c", ActionMnemonic: "CppCompile", TargetId: "//x", ConfigurationId: "k"},
	} {
		b, _ := proto.Marshal(m)
		if got := ToolInvocationIDOf(string(b)); got != m.ToolInvocationId {
			t.Errorf("%v: %q, want %q", m, got, m.ToolInvocationId)
		}
	}
	b, _ := proto.Marshal(&repb.RequestMetadata{ToolInvocationId: "inv-3"})
	if got := ToolInvocationIDOf(string(b[:len(b)-2])); got != "" {
		t.Errorf("a truncated message: %q, want \"\"", got)
	}
}

// FuzzToolInvocationIDOf: on any bytes (the header comes from clients) the
// field reader never panics and, whenever the message decodes, agrees
// with the decode.
func FuzzToolInvocationIDOf(f *testing.F) {
	for _, m := range []*repb.RequestMetadata{
		{ToolInvocationId: "inv-1"},
		{ToolDetails: &repb.ToolDetails{ToolName: "bazel"}, ToolInvocationId: "inv-2", TargetId: "//x"},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x1a, 0x05, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		got := ToolInvocationIDOf(string(b))
		var m repb.RequestMetadata
		if err := proto.Unmarshal(b, &m); err == nil && got != m.ToolInvocationId {
			t.Fatalf("ToolInvocationIDOf = %q, the decode says %q", got, m.ToolInvocationId)
		}
	})
}
