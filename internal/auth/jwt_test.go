package auth

import (
	"crypto"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gantry-build/gantry/internal/auth/authtest"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWTVerify(t *testing.T) {
	rsaKey, ecKey, otherEC := authtest.RSAKey(t), authtest.ECKey(t), authtest.ECKey(t)
	dir := t.TempDir()
	var pubs []crypto.PublicKey
	for i, k := range []crypto.PublicKey{&rsaKey.PublicKey, &ecKey.PublicKey} {
		f := authtest.PublicKeyFile(t, dir, []string{"rsa.pem", "ec.pem"}[i], k)
		data, _ := os.ReadFile(f)
		ks, err := ParsePublicKeys(data, f)
		if err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, ks...)
	}
	v, err := NewJWTVerifier(JWTOptions{HS256Secret: testSecret, PublicKeys: pubs, Issuer: "https://idp.example", Audience: "gantry",
		GroupsClaim: "groups", RequireExpiry: true})
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	good := func(extra jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "alice", "iss": "https://idp.example", "aud": "gantry", "exp": exp, "groups": []string{"dev", "ci"}}
		for k, val := range extra {
			if val == nil {
				delete(c, k)
			} else {
				c[k] = val
			}
		}
		return c
	}
	for _, c := range []struct {
		name  string
		token string
		want  string // "" is success
	}{
		{"HS256", sign(t, jwt.SigningMethodHS256, testSecret, good(nil)), ""},
		{"RS256", sign(t, jwt.SigningMethodRS256, rsaKey, good(nil)), ""},
		{"ES256", sign(t, jwt.SigningMethodES256, ecKey, good(nil)), ""},
		{"expired", sign(t, jwt.SigningMethodHS256, testSecret, good(jwt.MapClaims{"exp": time.Now().Add(-time.Hour).Unix()})), "expired"},
		{"no exp", sign(t, jwt.SigningMethodHS256, testSecret, good(jwt.MapClaims{"exp": nil})), "lacks a required claim"},
		{"not yet", sign(t, jwt.SigningMethodHS256, testSecret, good(jwt.MapClaims{"nbf": time.Now().Add(time.Hour).Unix()})), "not valid yet"},
		{"bad HS secret", sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), good(nil)), "signature does not verify"},
		{"bad EC key", sign(t, jwt.SigningMethodES256, otherEC, good(nil)), "signature does not verify"},
		{"issuer", sign(t, jwt.SigningMethodHS256, testSecret, good(jwt.MapClaims{"iss": "evil"})), "issuer"},
		{"audience", sign(t, jwt.SigningMethodHS256, testSecret, good(jwt.MapClaims{"aud": "other"})), "audience"},
		{"no subject", sign(t, jwt.SigningMethodHS256, testSecret, good(jwt.MapClaims{"sub": nil})), "no string claim \"sub\""},
		{"reserved subject", sign(t, jwt.SigningMethodHS256, testSecret, good(jwt.MapClaims{"sub": "*"})), "reserved"},
		{"alg none", sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good(nil)), "signature does not verify"},
		{"malformed", "a.b.c", "malformed"},
	} {
		id, err := v.Verify(c.token)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "" && (id.Subject != "alice" || id.Source != SourceJWT || strings.Join(id.Groups, ",") != "dev,ci"):
			t.Errorf("%s: identity %+v", c.name, id)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestJWTSubjectClaimAndKeyConfusion(t *testing.T) {
	ecKey := authtest.ECKey(t)
	v, err := NewJWTVerifier(JWTOptions{PublicKeys: []crypto.PublicKey{&ecKey.PublicKey}, SubjectClaim: "email"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := v.Verify(sign(t, jwt.SigningMethodES256, ecKey, jwt.MapClaims{"email": "a@example.com"}))
	if err != nil || id.Subject != "a@example.com" {
		t.Fatalf("subject claim email: %v %v", id, err)
	}
	// HS256 is not accepted without a secret (no key confusion with the public key).
	if _, err := v.Verify(sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"email": "a@example.com"})); err == nil {
		t.Fatal("an HS256 token was accepted by a verifier with only an ECDSA key")
	}
}

func TestJWTConfigErrors(t *testing.T) {
	if _, err := NewJWTVerifier(JWTOptions{}); err == nil || !strings.Contains(err.Error(), "no keys") {
		t.Errorf("no keys: %v", err)
	}
	if _, err := NewJWTVerifier(JWTOptions{HS256Secret: []byte("short")}); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Errorf("short secret: %v", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "k.pem")
	os.WriteFile(p, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600)
	data, _ := os.ReadFile(p)
	if _, err := ParsePublicKeys(data, p); err == nil || !strings.Contains(err.Error(), "never a private key") {
		t.Errorf("private key: %v", err)
	}
	if _, err := ParsePublicKeys([]byte("nothing"), "x"); err == nil || !strings.Contains(err.Error(), "no PEM public key") {
		t.Errorf("empty: %v", err)
	}
}
