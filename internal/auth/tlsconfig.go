package auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync/atomic"
)

// Client certificate modes (tls.client_auth).
const (
	ClientAuthNone     = "none"
	ClientAuthOptional = "optional"
	ClientAuthRequire  = "require"
)

// ServerTLS is the server's TLS configuration, whose certificate and
// client CAs can be reloaded while serving.
type ServerTLS struct {
	certFile, keyFile, caFile string
	cert                      atomic.Pointer[tls.Certificate]
	pool                      atomic.Pointer[x509.CertPool]
	clientAuth                tls.ClientAuthType
}

// NewServerTLS loads the certificate and key and, when caFile is set, the
// CAs that sign client certificates. mode is none, optional or require.
func NewServerTLS(certFile, keyFile, caFile, mode string) (*ServerTLS, error) {
	s := &ServerTLS{certFile: certFile, keyFile: keyFile, caFile: caFile}
	switch mode {
	case ClientAuthNone, "":
		s.clientAuth = tls.NoClientCert
	case ClientAuthOptional:
		s.clientAuth = tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		s.clientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("tls.client_auth: %q is not a mode; use none, optional or require", mode)
	}
	if s.clientAuth != tls.NoClientCert && caFile == "" {
		return nil, fmt.Errorf("tls.client_auth: %s needs tls.client_ca_file, the CA certificates that sign client certificates", mode)
	}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload re-reads the files; on error the old ones stay.
func (s *ServerTLS) Reload() error {
	cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return fmt.Errorf("tls.cert_file/tls.key_file: %v; give a PEM certificate (chain) and its private key", err)
	}
	var pool *x509.CertPool
	if s.caFile != "" {
		if pool, err = LoadCertPool(s.caFile); err != nil {
			return fmt.Errorf("tls.client_ca_file: %v", err)
		}
	}
	s.cert.Store(&cert)
	s.pool.Store(pool)
	return nil
}

// LoadCertPool reads PEM CA certificates.
func LoadCertPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// Config returns a tls.Config that serves the current certificate and
// verifies clients against the current CAs. HTTP/2 is offered for gRPC.
func (s *ServerTLS) Config(nextProtos ...string) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{
			MinVersion:   tls.VersionTLS12,
			NextProtos:   nextProtos,
			Certificates: []tls.Certificate{*s.cert.Load()},
			ClientAuth:   s.clientAuth,
			ClientCAs:    s.pool.Load(),
		}, nil
	}
	return base
}
