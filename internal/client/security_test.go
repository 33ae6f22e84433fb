package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecurityRefusesPlainTextTokens(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(tok, []byte("some-token-0123456789\n"), 0o600)
	sec := Security{TokenFile: tok}
	if _, err := sec.DialOptions("build.example.com:8980"); err == nil || !strings.Contains(err.Error(), "plain text") {
		t.Fatalf("token to a remote host without TLS: %v", err)
	}
	for _, target := range []string{"127.0.0.1:8980", "localhost:1", "[::1]:8980", "dns:///127.0.0.1:1", "unix:///tmp/s"} {
		if _, err := sec.DialOptions(target); err != nil {
			t.Errorf("token to loopback %s: %v", target, err)
		}
	}
	sec.TLS = true
	if _, err := sec.DialOptions("build.example.com:8980"); err != nil {
		t.Fatalf("token over TLS: %v", err)
	}
	for _, c := range []struct {
		sec  Security
		want string
	}{
		{Security{CertFile: "x"}, "both --tls-cert and --tls-key"},
		{Security{CAFile: filepath.Join(t.TempDir(), "none")}, "--tls-ca"},
		{Security{CAFile: tok}, "no PEM certificate"},
		{Security{TokenFile: filepath.Join(t.TempDir(), "none")}, "--token-file"},
	} {
		if _, err := c.sec.DialOptions("127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.sec, err, c.want)
		}
	}
}
