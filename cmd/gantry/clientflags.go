package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
)

// clientSecurity is how the subcommands that connect to a server (worker,
// bench, queues, quota) use TLS and a token: root's persistent flags,
// defaulting to the GANTRY_TLS_* and GANTRY_TOKEN_FILE variables.
var clientSecurity client.Security

func addClientSecurityFlags(fs *pflag.FlagSet) {
	clientSecurity = client.Security{}
	fs.BoolVar(&clientSecurity.TLS, "tls", os.Getenv("GANTRY_TLS") == "true", "connect to the server with TLS, verified with the system's CAs unless --tls-ca is given (env GANTRY_TLS=true)")
	fs.StringVar(&clientSecurity.CAFile, "tls-ca", os.Getenv("GANTRY_TLS_CA"), "PEM CA certificate(s) that sign the server's certificate; implies --tls (env GANTRY_TLS_CA)")
	fs.StringVar(&clientSecurity.CertFile, "tls-cert", os.Getenv("GANTRY_TLS_CERT"), "PEM client certificate for servers that require mutual TLS (env GANTRY_TLS_CERT)")
	fs.StringVar(&clientSecurity.KeyFile, "tls-key", os.Getenv("GANTRY_TLS_KEY"), "PEM private key of --tls-cert (env GANTRY_TLS_KEY)")
	fs.StringVar(&clientSecurity.ServerName, "tls-server-name", os.Getenv("GANTRY_TLS_SERVER_NAME"), "name to verify in the server's certificate instead of the host (env GANTRY_TLS_SERVER_NAME)")
	fs.StringVar(&clientSecurity.TokenFile, "token-file", os.Getenv("GANTRY_TOKEN_FILE"), "file holding a bearer token (static token or JWT) sent with every call (env GANTRY_TOKEN_FILE)")
}

// applyClientConfig fills the client security flags not given on the
// command line (or in the environment) from a config file's client section.
func applyClientConfig(fs *pflag.FlagSet, c config.ClientConfig) {
	set := func(flag string, dst *string, v string) {
		if v != "" && !fs.Changed(flag) && *dst == "" {
			*dst = v
		}
	}
	if c.TLS && !fs.Changed("tls") {
		clientSecurity.TLS = true
	}
	set("tls-ca", &clientSecurity.CAFile, c.TLSCAFile)
	set("tls-cert", &clientSecurity.CertFile, c.TLSCertFile)
	set("tls-key", &clientSecurity.KeyFile, c.TLSKeyFile)
	set("tls-server-name", &clientSecurity.ServerName, c.TLSServerName)
	set("token-file", &clientSecurity.TokenFile, c.TokenFile)
}

// dialServer connects to a Gantry server with the client security
// flags. Calls that fail because addr does not speak gRPC (most often
// Gantry's HTTP port given by mistake) say so and name the right address
// (portCheck).
func dialServer(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	check := newPortCheck(addr, clientSecurity)
	return client.DialSecure(addr, clientSecurity, append(check.dialOptions(), opts...)...)
}

// builtinServer is the server address client commands use when neither
// --server nor GANTRY_SERVER is given.
const builtinServer = "127.0.0.1:8980"

// serverFromEnv is the default server address of every client command:
// GANTRY_SERVER, or 127.0.0.1:8980. A launcher such as `gantry cc` takes
// no flags, so the environment is how it finds the server.
func serverFromEnv() string {
	if s := strings.TrimSpace(os.Getenv("GANTRY_SERVER")); s != "" {
		return s
	}
	return builtinServer
}

// addServerFlag defines a client command's server address flag (--server,
// or name) defaulting to serverFromEnv.
func addServerFlag(fs *pflag.FlagSet, p *string, name, usage string) {
	fs.StringVar(p, name, serverFromEnv(), usage+" (env GANTRY_SERVER)")
}

// unreachable rewrites an error that means no server answers at addr
// (UNAVAILABLE) as one line that says what to do; other errors pass
// through.
func unreachable(addr string, err error) error {
	if status.Code(err) != codes.Unavailable {
		return err
	}
	if wp := asWrongPort(err); wp != nil {
		return wp // something answers at addr, and it says what to do
	}
	msg := err.Error()
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		msg = se.GRPCStatus().Message()
	}
	return fmt.Errorf("cannot reach Gantry at %s: %s; start it with `gantry serve` or set GANTRY_SERVER (or --server) to its address", addr, msg)
}
