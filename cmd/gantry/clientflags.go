package main

import (
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

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

// dialServer connects to a Gantry server with the client security flags.
func dialServer(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return client.DialSecure(addr, clientSecurity, opts...)
}
