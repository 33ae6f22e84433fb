package auth

import (
	"strings"
	"testing"
)

// FuzzParseTokens: any file either parses into identities that look
// themselves up, or fails with a message naming the file and line.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("alice alice-token-0123456789\n"))
	f.Add([]byte("# c\nci tok-0123456789abcdef a,b\nbob sha256:" + strings.Repeat("ab", 32) + "\n"))
	f.Add([]byte("a b c d\n"))
	f.Add([]byte("\xff\xfe x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := ParseTokens(data, "tokens")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tokens:") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		for _, line := range strings.Split(string(data), "\n") {
			fs := strings.Fields(line)
			if len(fs) < 2 || strings.HasPrefix(fs[0], "#") || strings.HasPrefix(fs[1], "sha256:") {
				continue
			}
			if id := tk.Lookup(fs[1]); id == nil || id.Subject != fs[0] {
				t.Fatalf("token of line %q looks up %v", line, id)
			}
		}
	})
}

// FuzzPolicy: any rule compiles or fails with its path, and a compiled
// policy answers without panicking.
func FuzzPolicy(f *testing.F) {
	f.Add("alice", "team-a/*", "read", "team-a/main")
	f.Add("group:ci", "*", "write", "")
	f.Add("cert:spiffe://x/y", "a*b*c", "*", "axbyc")
	f.Add("anonymous", "", "cas.read", "x")
	f.Fuzz(func(t *testing.T, ident, pattern, perm, instance string) {
		p, err := CompilePolicy([]Rule{{Identities: []string{ident}, Instances: []string{pattern}, Permissions: []string{perm}}}, "auth.policy")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "auth.policy[0].") {
				t.Fatalf("error without the rule's path: %v", err)
			}
			return
		}
		id := &Identity{Subject: ident, Names: []string{ident}, Source: SourceToken}
		p.Allowed(id, PermAll, instance, false)
		p.Allowed(Anonymous, PermAll, instance, true)
		if pattern == instance && !strings.Contains(pattern, "*") {
			m, _ := parseIdentity(ident)
			if m.kind == idName && !p.Allowed(id, permNames[perm], instance, false) {
				t.Fatalf("exact rule %q/%q/%q does not allow itself", ident, pattern, perm)
			}
		}
	})
}

// FuzzMatch: "*" matches everything; a pattern without stars only itself.
func FuzzMatch(f *testing.F) {
	f.Add("a*b", "axxb")
	f.Add("***", "")
	f.Add("*a*a*a*a*a*b", strings.Repeat("a", 40))
	f.Fuzz(func(t *testing.T, pattern, name string) {
		got := Match(pattern, name)
		if !strings.Contains(pattern, "*") && got != (pattern == name) {
			t.Fatalf("Match(%q, %q) = %v", pattern, name, got)
		}
		if Match("*", name) != true || !Match(name+"*", name) || !Match("*"+name, name) {
			t.Fatalf("star patterns do not match %q", name)
		}
		_ = got
	})
}

// FuzzBearer: any authorization header value is either a known identity
// or UNAUTHENTICATED, never a panic or another code.
func FuzzBearer(f *testing.F) {
	tk, err := ParseTokens([]byte("alice alice-token-0123456789\n"), "t")
	if err != nil {
		f.Fatal(err)
	}
	v, err := NewJWTVerifier(JWTOptions{HS256Secret: testSecret, RequireExpiry: true})
	if err != nil {
		f.Fatal(err)
	}
	s := &Settings{Tokens: tk, JWT: v}
	f.Add("Bearer alice-token-0123456789")
	f.Add("bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln")
	f.Add("Basic dXNlcjpwdw==")
	f.Add("Bearer a.b.c")
	f.Add("Bearer " + strings.Repeat(".", 3))
	f.Fuzz(func(t *testing.T, header string) {
		tok, present, err := bearer([]string{header})
		if !present {
			t.Fatal("a header was not seen")
		}
		if err != nil {
			return
		}
		id, err := s.identifyToken(tok)
		if err != nil {
			if !strings.Contains(err.Error(), "Unauthenticated") {
				t.Fatalf("error %v is not UNAUTHENTICATED", err)
			}
			return
		}
		if id.Subject != "alice" && id.Source != SourceJWT {
			t.Fatalf("token %q gave %v", tok, id)
		}
	})
}
