package auth

import (
	"context"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A scheduler believes the forwarded caller only from a trusted
// frontend, refuses the header from anyone else and a trusted
// frontend's call without it, and authorizes the forwarded caller (not
// the frontend) by the policy.
func TestForwardedCaller(t *testing.T) {
	tk, err := ParseTokens([]byte("frontend frontend-token-0123456789\nalice alice-token-0123456789\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t,
		Rule{Identities: []string{"alice"}, Instances: []string{"team-a/*"}, Permissions: []string{"execute"}},
		Rule{Identities: []string{"token:frontend"}, Instances: []string{"*"}, Permissions: []string{"read"}},
	)
	fe, err := CompileIdentities([]string{"token:frontend"}, "cluster.frontend_identities")
	if err != nil {
		t.Fatal(err)
	}
	a := New(Settings{Tokens: tk, Policy: p, Frontends: fe}, nil)
	info := &grpc.UnaryServerInfo{FullMethod: "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"}
	execInfo := &grpc.UnaryServerInfo{FullMethod: "/build.bazel.remote.execution.v2.Execution/Execute"}
	var seen *Identity
	h := func(ctx context.Context, _ any) (any, error) { seen = FromContext(ctx); return nil, nil }
	call := func(info *grpc.UnaryServerInfo, instance string, kv ...string) error {
		seen = nil
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
		_, err := a.UnaryInterceptor(ctx, &repb.GetActionResultRequest{InstanceName: instance}, info, h)
		return err
	}
	const feTok, aliceTok = "Bearer frontend-token-0123456789", "Bearer alice-token-0123456789"
	alice := EncodeForwarded(&Identity{Subject: "alice", Names: []string{"alice"}, Source: SourceToken})

	// The frontend forwarding alice: alice's permissions, not its own.
	if err := call(execInfo, "team-a/x", "authorization", feTok, ForwardedCallerHeader, alice); err != nil || seen == nil || seen.String() != "token:alice" {
		t.Fatalf("forwarded alice: %v, identity %v", err, seen)
	}
	if err := call(info, "team-a/x", "authorization", feTok, ForwardedCallerHeader, alice); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "token:alice lacks permission ac.read") {
		t.Errorf("forwarded alice reading the action cache: %v, want PERMISSION_DENIED for alice", err)
	}
	// alice asserting someone else directly.
	if err := call(execInfo, "team-a/x", "authorization", aliceTok, ForwardedCallerHeader, EncodeForwarded(Internal)); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not one of the frontends") {
		t.Errorf("alice forwarding: %v, want PERMISSION_DENIED", err)
	}
	// The frontend's own call, without a forwarded caller.
	if err := call(info, "team-a/x", "authorization", feTok); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "without its caller's identity") {
		t.Errorf("frontend without a forwarded caller: %v, want PERMISSION_DENIED", err)
	}
	// alice directly: herself.
	if err := call(execInfo, "team-a/x", "authorization", aliceTok); err != nil || seen.String() != "token:alice" {
		t.Errorf("alice directly: %v %v", err, seen)
	}
	// Garbage, two identities, anonymous (not allowed here).
	for _, c := range []struct {
		kv   []string
		want string
	}{
		{[]string{"authorization", feTok, ForwardedCallerHeader, "{"}, "cannot read"},
		{[]string{"authorization", feTok, ForwardedCallerHeader, `{"subject":"x","source":"root"}`}, "not token, jwt"},
		{[]string{"authorization", feTok, ForwardedCallerHeader, `{"subject":"","source":"token"}`}, "no subject"},
		{[]string{"authorization", feTok, ForwardedCallerHeader, alice, ForwardedCallerHeader, alice}, "exactly one"},
		{[]string{"authorization", feTok, ForwardedCallerHeader, EncodeForwarded(Anonymous)}, "does not allow anonymous"},
	} {
		if err := call(execInfo, "team-a/x", c.kv...); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want UNAUTHENTICATED containing %q", c.kv, err, c.want)
		}
	}
	// Without trusted frontends the header means nothing.
	plain := New(Settings{Tokens: tk, Policy: p}, nil)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", aliceTok, ForwardedCallerHeader, EncodeForwarded(Internal)))
	if _, err := plain.UnaryInterceptor(ctx, &repb.GetActionResultRequest{InstanceName: "team-a/x"}, execInfo, h); err != nil || seen.String() != "token:alice" {
		t.Errorf("header without trusted frontends: %v %v, want alice herself", err, seen)
	}

	for _, bad := range []string{"*", "anonymous", "group:"} {
		if _, err := CompileIdentities([]string{bad}, "cluster.frontend_identities"); err == nil || !strings.Contains(err.Error(), "cluster.frontend_identities[0]") {
			t.Errorf("CompileIdentities(%q) = %v, want an error naming the key", bad, err)
		}
	}
}

func TestForwardedRoundTrip(t *testing.T) {
	for _, id := range []*Identity{
		{Subject: "alice", Names: []string{"alice"}, Groups: []string{"dev"}, Source: SourceJWT},
		{Subject: "w1", Names: []string{"w1", "spiffe://x/w1"}, Source: SourceCert},
		Anonymous, Internal,
	} {
		got, err := decodeForwarded(EncodeForwarded(id))
		if err != nil || got.String() != id.String() || strings.Join(got.Names, ",") != strings.Join(id.Names, ",") || strings.Join(got.Groups, ",") != strings.Join(id.Groups, ",") {
			t.Errorf("round trip of %+v = %+v, %v", id, got, err)
		}
	}
}
