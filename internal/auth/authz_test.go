package auth

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// opsOf finds operations' instances in a map.
type opsOf map[string]string

func (o opsOf) OperationInstance(name string) (string, bool) {
	inst, ok := o[name]
	return inst, ok
}

// named is a request that names an operation.
type named string

func (n named) GetName() string { return string(n) }

// An operation's request is checked on the operation's instance; an
// unknown operation passes to a caller with the permission somewhere
// (the service answers NOT_FOUND).
func TestAuthorizeOperation(t *testing.T) {
	p := mustPolicy(t, Rule{Identities: []string{"alice"}, Instances: []string{"team-a/*"}, Permissions: []string{"execute"}})
	a := New(Settings{Policy: p}, opsOf{"op-a": "team-a/main", "op-b": "team-b/main"})
	alice := &Identity{Subject: "alice", Names: []string{"alice"}, Source: SourceToken}
	bob := &Identity{Subject: "bob", Names: []string{"bob"}, Source: SourceToken}
	m := method{need: PermExecute, from: fromOperation}
	for _, tc := range []struct {
		id   *Identity
		op   string
		want string // "" allowed, else a piece of the denial
	}{
		{alice, "op-a", ""},
		{alice, "op-b", `instance "team-b/main" (operation "op-b")`},
		{alice, "op-unknown", ""},
		{bob, "op-unknown", "any instance"},
	} {
		err := a.authorize(tc.id, m, "/test/Wait", named(tc.op))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s on %s: %v, want allowed", tc.id, tc.op, err)
		case tc.want != "" && (status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s on %s: %v, want PERMISSION_DENIED naming %s", tc.id, tc.op, err, tc.want)
		}
	}
}
