package main

import (
	"net"
	"os"
	"strings"

	"github.com/gantry-build/gantry/internal/config"
)

// serveHint is what gantry serve prints on stderr once its ports are
// bound, so that a new user sees how to use it without reading the
// docs: the Bazel flags for its gRPC address (roles all and frontend,
// which serve REAPI to clients) and the status page on its HTTP port
// (roles that run a scheduler). httpAddr is "" when the HTTP port is
// off.
func serveHint(cfg config.Config, grpcAddr, httpAddr string) string {
	var b strings.Builder
	tls := cfg.TLS.Enabled()
	if cfg.Role != config.RoleScheduler {
		scheme := "grpc://"
		if tls {
			scheme = "grpcs://"
		}
		b.WriteString("gantry serve: point Bazel at it with: bazel build --remote_executor=" + scheme + reachableAddr(grpcAddr))
		if cfg.Auth.Enabled {
			b.WriteString(` --remote_header="Authorization=Bearer $TOKEN"`)
		}
		b.WriteString(" //...\n")
	}
	if httpAddr != "" && cfg.Role != config.RoleFrontend {
		scheme := "http://"
		if tls {
			scheme = "https://"
		}
		b.WriteString("gantry serve: status pages at " + scheme + reachableAddr(httpAddr) + "/status\n")
	}
	return b.String()
}

// reachableAddr is a bound address as a client writes it: a wildcard
// host (0.0.0.0, ::) becomes this machine's host name, since the
// wildcard itself is not an address to connect to.
func reachableAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if name, err := os.Hostname(); err == nil && name != "" {
			host = name
		}
	}
	return net.JoinHostPort(host, port)
}
