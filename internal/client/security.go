package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Security is how a client proves who it is and checks the server: TLS
// (with an optional CA file, client certificate and server name) and a
// bearer token. The zero value is plain text without credentials.
type Security struct {
	// TLS turns on TLS; it is implied by CAFile, CertFile and KeyFile.
	// Without CAFile the system's roots verify the server.
	TLS bool
	// CAFile holds PEM CA certificates that sign the server's certificate.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key, for
	// servers that require mutual TLS.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
	// TokenFile holds a bearer token (or a JWT), sent with every call.
	TokenFile string
}

// Enabled reports whether s asks for TLS.
func (s Security) Enabled() bool {
	return s.TLS || s.CAFile != "" || s.CertFile != "" || s.KeyFile != ""
}

// DialOptions are the grpc options for s when dialling target. A token
// is only sent over TLS or to a loopback address.
func (s Security) DialOptions(target string) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if s.Enabled() {
		tc, err := s.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	}
	if s.TokenFile != "" {
		data, err := os.ReadFile(s.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("token file: %w; pass the file that holds your token with --token-file (or GANTRY_TOKEN_FILE)", err)
		}
		tok := strings.TrimSpace(string(data))
		if tok == "" || strings.ContainsAny(tok, "\r\n") {
			return nil, fmt.Errorf("token file %s must hold exactly one token on one line", s.TokenFile)
		}
		if !s.Enabled() && !loopbackTarget(target) {
			return nil, fmt.Errorf("refusing to send the token from %s in plain text to %s; connect with TLS (--tls or --tls-ca) or to a loopback address", s.TokenFile, target)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken{header: "Bearer " + tok, secure: s.Enabled()}))
	}
	return opts, nil
}

// TLSConfig is the TLS configuration of s, for speaking another protocol
// to the same server (an HTTP request to its HTTP port).
func (s Security) TLSConfig() (*tls.Config, error) { return s.tlsConfig() }

func (s Security) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName}
	if s.CAFile != "" {
		data, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA file: %w; pass the CA certificate that signed the server's with --tls-ca", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("TLS CA file %s holds no PEM certificate", s.CAFile)
		}
		tc.RootCAs = pool
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return nil, fmt.Errorf("a client certificate needs both --tls-cert and --tls-key")
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w; pass a PEM certificate with --tls-cert and its key with --tls-key", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// loopbackTarget reports whether a gRPC target names this host.
func loopbackTarget(target string) bool {
	if strings.HasPrefix(target, "unix:") {
		return true
	}
	if i := strings.LastIndex(target, "///"); i >= 0 {
		target = target[i+3:]
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

type bearerToken struct {
	header string
	secure bool
}

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.header}, nil
}

func (b bearerToken) RequireTransportSecurity() bool { return b.secure }

// DialSecure is Dial with the TLS and token options of sec.
func DialSecure(target string, sec Security, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	so, err := sec.DialOptions(target)
	if err != nil {
		return nil, err
	}
	return Dial(target, append(so, opts...)...)
}
