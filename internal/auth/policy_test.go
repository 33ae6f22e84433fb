package auth

import (
	"context"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pat, name string
		want      bool
	}{
		{"*", "", true},
		{"*", "a/b/c", true},
		{"", "", true},
		{"", "a", false},
		{"team-a", "team-a", true},
		{"team-a", "team-ab", false},
		{"team-a/*", "team-a/main", true},
		{"team-a/*", "team-a/x/y", true},
		{"team-a/*", "team-a", false},
		{"team-a/*", "team-b/main", false},
		{"*/ci", "team-a/ci", true},
		{"*/ci", "team-a/ci/x", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"a*", "*", false},
	} {
		if got := Match(c.pat, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pat, c.name, got, c.want)
		}
	}
}

func mustPolicy(t *testing.T, rules ...Rule) *Policy {
	t.Helper()
	p, err := CompilePolicy(rules, "auth.policy")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyAllowed(t *testing.T) {
	p := mustPolicy(t,
		Rule{Identities: []string{"alice"}, Instances: []string{"team-a/*"}, Permissions: []string{"read", "execute"}},
		Rule{Identities: []string{"group:ci"}, Instances: []string{"*"}, Permissions: []string{"write"}},
		Rule{Identities: []string{"cert:worker-1"}, Instances: []string{"*"}, Permissions: []string{"worker"}},
		Rule{Identities: []string{"anonymous"}, Instances: []string{""}, Permissions: []string{"cas.read"}},
		Rule{Identities: []string{"*"}, Instances: []string{"public"}, Permissions: []string{"ac.read"}},
	)
	alice := &Identity{Subject: "alice", Names: []string{"alice"}, Source: SourceToken}
	ci := &Identity{Subject: "bot", Names: []string{"bot"}, Groups: []string{"ci"}, Source: SourceJWT}
	w := &Identity{Subject: "worker-1", Names: []string{"worker-1"}, Source: SourceCert}
	wTok := &Identity{Subject: "worker-1", Names: []string{"worker-1"}, Source: SourceToken}
	for _, c := range []struct {
		id       *Identity
		need     Perm
		instance string
		global   bool
		want     bool
	}{
		{alice, PermCASRead, "team-a/main", false, true},
		{alice, PermACRead, "team-a/main", false, true},
		{alice, PermExecute, "team-a/main", false, true},
		{alice, PermCASWrite, "team-a/main", false, false},
		{alice, PermACRead, "team-b/main", false, false},
		{alice, PermACRead, "public", false, true},
		{alice, PermAdmin, "", true, false},
		{ci, PermACWrite, "anything", false, true},
		{ci, PermCASWrite, "", true, true},
		{ci, PermExecute, "x", false, false},
		{w, PermWorker, "", true, true},
		{wTok, PermWorker, "", true, false}, // cert: names only certificates
		{Anonymous, PermCASRead, "", false, true},
		{Anonymous, PermCASRead, "team-a/main", false, false},
		{Anonymous, PermACRead, "public", false, false}, // * is authenticated callers only
		{Internal, PermAdmin, "", true, true},
	} {
		if got := p.Allowed(c.id, c.need, c.instance, c.global); got != c.want {
			t.Errorf("Allowed(%v, %v, %q, global=%v) = %v, want %v", c.id, c.need, c.instance, c.global, got, c.want)
		}
	}
	if !p.AllowedAnywhere(w, PermWorker) || p.AllowedAnywhere(alice, PermWorker) {
		t.Error("AllowedAnywhere(worker) wrong")
	}
}

func TestCompilePolicyErrors(t *testing.T) {
	for _, c := range []struct {
		rule Rule
		want string
	}{
		{Rule{Instances: []string{"*"}, Permissions: []string{"read"}}, "auth.policy[0].identities: a rule needs"},
		{Rule{Identities: []string{"a"}, Permissions: []string{"read"}}, "auth.policy[0].instances"},
		{Rule{Identities: []string{"a"}, Instances: []string{"*"}}, "auth.policy[0].permissions"},
		{Rule{Identities: []string{"a"}, Instances: []string{"*"}, Permissions: []string{"rede"}}, `permissions[0]: unknown permission "rede"; use`},
		{Rule{Identities: []string{"group:"}, Instances: []string{"*"}, Permissions: []string{"read"}}, "identities[0]: identity \"group:\" has nothing after"},
		{Rule{Identities: []string{" a"}, Instances: []string{"*"}, Permissions: []string{"read"}}, "spaces"},
		{Rule{Identities: []string{"a"}, Instances: []string{"a/**"}, Permissions: []string{"read"}}, "single *"},
	} {
		_, err := CompilePolicy([]Rule{c.rule}, "auth.policy")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CompilePolicy(%+v) = %v, want an error containing %q", c.rule, err, c.want)
		}
	}
}

func TestURIIdentityWithColon(t *testing.T) {
	p := mustPolicy(t, Rule{Identities: []string{"spiffe://example.org/ci"}, Instances: []string{"*"}, Permissions: []string{"read"}})
	id := &Identity{Subject: "spiffe://example.org/ci", Names: []string{"spiffe://example.org/ci"}, Source: SourceCert}
	if !p.Allowed(id, PermCASRead, "x", false) {
		t.Error("a URI name with a colon was not matched")
	}
}

func BenchmarkAllowed(b *testing.B) {
	rules := []Rule{}
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		rules = append(rules, Rule{Identities: []string{n, "group:" + n}, Instances: []string{"team-" + n + "/*"}, Permissions: []string{"read", "execute"}})
	}
	rules = append(rules, Rule{Identities: []string{"alice"}, Instances: []string{"team-z/*"}, Permissions: []string{"read"}})
	p, err := CompilePolicy(rules, "p")
	if err != nil {
		b.Fatal(err)
	}
	id := &Identity{Subject: "alice", Names: []string{"alice"}, Groups: []string{"dev"}, Source: SourceToken}
	b.ReportAllocs()
	for b.Loop() {
		if !p.Allowed(id, PermACRead, "team-z/main", false) {
			b.Fatal("denied")
		}
	}
}

// BenchmarkUnaryInterceptor is the whole per-call cost of a static-token
// call: header parsing, token lookup, method table, policy check.
func BenchmarkUnaryInterceptor(b *testing.B) {
	tk, err := ParseTokens([]byte("alice alice-token-0123456789\n"), "t")
	if err != nil {
		b.Fatal(err)
	}
	p, err := CompilePolicy([]Rule{{Identities: []string{"alice"}, Instances: []string{"team-a/*"}, Permissions: []string{"read"}}}, "p")
	if err != nil {
		b.Fatal(err)
	}
	a := New(Settings{Tokens: tk, Policy: p}, nil)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer alice-token-0123456789"))
	req := &repb.GetActionResultRequest{InstanceName: "team-a/main"}
	info := &grpc.UnaryServerInfo{FullMethod: "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"}
	h := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.UnaryInterceptor(ctx, req, info, h); err != nil {
			b.Fatal(err)
		}
	}
}
