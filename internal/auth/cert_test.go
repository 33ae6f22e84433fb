package auth

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/auth/authtest"
)

func TestCertIdentityNames(t *testing.T) {
	ca := authtest.NewCA(t, "names")
	certFile, _ := ca.Issue(authtest.Names{CN: "build-1", DNS: []string{"build-1.example.com"}, URIs: []string{"spiffe://example.com/worker"}, Emails: []string{"ci@example.com"}})
	data, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	chains := [][]*x509.Certificate{{c}}
	for _, tc := range []struct {
		fields []string
		want   string
	}{
		{[]string{"cn"}, "build-1"},
		{[]string{"dns"}, "build-1.example.com"},
		{[]string{"uri"}, "spiffe://example.com/worker"},
		{[]string{"email"}, "ci@example.com"},
		{[]string{"email", "cn", "dns", "uri"}, "ci@example.com,build-1,build-1.example.com,spiffe://example.com/worker"},
	} {
		s := &Settings{CertNames: tc.fields}
		id, err := s.certIdentity(chains)
		if err != nil || strings.Join(id.Names, ",") != tc.want || id.Subject != id.Names[0] || id.Source != SourceCert {
			t.Errorf("%v: %+v %v, want names %s", tc.fields, id, err, tc.want)
		}
	}
	// A certificate without the configured names is refused, saying which.
	bare, _ := ca.Issue(authtest.Names{CN: "only-cn"})
	data, _ = os.ReadFile(bare)
	b, _ = pem.Decode(data)
	c, _ = x509.ParseCertificate(b.Bytes)
	if _, err := (&Settings{CertNames: []string{"uri"}}).certIdentity([][]*x509.Certificate{{c}}); err == nil || !strings.Contains(err.Error(), "carries none of the names this server reads (uri)") {
		t.Errorf("no URI SAN: %v", err)
	}
	// Without certificate names configured, certificates identify nobody.
	if id, err := (&Settings{}).certIdentity(chains); id != nil || err != nil {
		t.Errorf("no names configured: %v %v", id, err)
	}
}
