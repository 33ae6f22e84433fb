package remote

import (
	"context"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/version"
)

// ToolName is the tool_name Gantry's client commands send in their
// RequestMetadata.
const ToolName = "gantry"

// Invocation is one run of a client command (gantry run, cc, batch) as a
// server sees it: a build on its builds page, named by the command line.
// Its calls carry REAPI RequestMetadata, as Bazel's do (tool_details, a
// tool_invocation_id new for every run), which also groups the run's
// actions in the server's fairness, and the name
// (protocol.BuildNameHeader).
type Invocation struct {
	// ID is the tool_invocation_id.
	ID string
	// Name names the build for people: the command line.
	Name string
	// Version is the client's version, the tool_version.
	Version string
}

// NewInvocation is a new invocation named by the command line args
// (quoted for a shell where needed, shortened to
// protocol.MaxBuildName).
func NewInvocation(args ...string) Invocation {
	words := make([]string, len(args))
	for i, a := range args {
		words[i] = shellWord(a)
	}
	return Invocation{ID: client.NewUUID(), Name: protocol.CleanBuildName(strings.Join(words, " ")), Version: version.Get().Version}
}

// Context returns ctx whose calls carry inv.
func (inv Invocation) Context(ctx context.Context) context.Context {
	return inv.ActionContext(ctx, "", "")
}

// ActionContext returns ctx whose calls carry inv and, for one action,
// its mnemonic and target (as Bazel sends them: a server's history labels
// the action with them). It replaces what ctx carried.
func (inv Invocation) ActionContext(ctx context.Context, mnemonic, target string) context.Context {
	rm, _ := proto.Marshal(&repb.RequestMetadata{
		ToolDetails:      &repb.ToolDetails{ToolName: ToolName, ToolVersion: inv.Version},
		ToolInvocationId: inv.ID, ActionMnemonic: mnemonic, TargetId: target,
	})
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(protocol.RequestMetadataHeader, string(rm))
	if inv.Name != "" {
		md.Set(protocol.BuildNameHeader, inv.Name)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// shellWord is w as a shell reads it back: as is when it holds nothing
// the shell treats specially, else in single quotes.
func shellWord(w string) string {
	if w != "" && strings.IndexFunc(w, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r))
	}) < 0 {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}
