// Package authtest makes throwaway certificates and keys for tests: a CA,
// server and client certificates, written as PEM files to a temporary
// directory. No private key is ever committed.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertFile is the CA certificate (PEM).
	CertFile string
	serial   int64
}

// NewCA makes a CA whose files live in a temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := ECKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{t: t, dir: t.TempDir(), cert: cert, key: key, serial: 1}
	ca.CertFile = ca.write(name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// Names are the names a certificate carries.
type Names struct {
	CN     string
	DNS    []string
	IPs    []net.IP
	URIs   []string
	Emails []string
}

// Issue makes a certificate for names (server and client usage) and
// returns its certificate and key files.
func (ca *CA) Issue(n Names) (certFile, keyFile string) {
	ca.t.Helper()
	key := ECKey(ca.t)
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber:   big.NewInt(ca.serial),
		Subject:        pkix.Name{CommonName: n.CN},
		NotBefore:      time.Now().Add(-time.Hour),
		NotAfter:       time.Now().Add(24 * time.Hour),
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:       n.DNS,
		IPAddresses:    n.IPs,
		EmailAddresses: n.Emails,
	}
	for _, u := range n.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			ca.t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	base := n.CN
	if base == "" {
		base = "anon"
	}
	base += "-" + big.NewInt(ca.serial).String()
	return ca.write(base+".pem", "CERTIFICATE", der), ca.write(base+"-key.pem", "PRIVATE KEY", kder)
}

// Server issues a certificate for 127.0.0.1 and localhost.
func (ca *CA) Server() (certFile, keyFile string) {
	return ca.Issue(Names{CN: "gantry-test-server", DNS: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
}

func (ca *CA) write(name, typ string, der []byte) string {
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return p
}

// ECKey makes a P-256 key.
func ECKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// RSAKey makes a 2048-bit RSA key.
func RSAKey(t testing.TB) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// PublicKeyFile writes pub as a PEM PUBLIC KEY file in dir.
func PublicKeyFile(t testing.TB, dir, name string, pub crypto.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
