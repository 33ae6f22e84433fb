package auth

import (
	"context"
	"crypto/tls"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// internalAuthInfo marks calls on the in-process connection.
type internalAuthInfo struct{ credentials.CommonAuthInfo }

func (internalAuthInfo) AuthType() string { return "gantry-internal" }

// internalConn is a connection accepted on the in-process listener: only
// code inside the server process can open one.
type internalConn struct{ net.Conn }

// InternalListener is an in-process listener for the server's own
// embedded worker: its calls carry the Internal identity and skip TLS.
type InternalListener struct{ l *bufconn.Listener }

// NewInternalListener returns an in-process listener.
func NewInternalListener() *InternalListener {
	return &InternalListener{l: bufconn.Listen(4 << 20)}
}

// Accept implements net.Listener.
func (l *InternalListener) Accept() (net.Conn, error) {
	c, err := l.l.Accept()
	if err != nil {
		return nil, err
	}
	return internalConn{c}, nil
}

// Close implements net.Listener.
func (l *InternalListener) Close() error { return l.l.Close() }

// Addr implements net.Listener.
func (l *InternalListener) Addr() net.Addr { return l.l.Addr() }

// DialOptions connect a client to this listener.
func (l *InternalListener) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.l.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
}

// Target is the gRPC target to dial with DialOptions.
const InternalTarget = "passthrough:///gantry-internal"

// ServerCredentials are the gRPC server's transport credentials: TLS with
// tlsConfig (plain text when nil) on network connections, and the
// internal identity on connections from an InternalListener.
func ServerCredentials(tlsConfig *tls.Config) credentials.TransportCredentials {
	c := &serverCreds{}
	if tlsConfig != nil {
		c.tls = credentials.NewTLS(tlsConfig)
	} else {
		c.plain = insecure.NewCredentials()
	}
	return c
}

type serverCreds struct {
	tls   credentials.TransportCredentials
	plain credentials.TransportCredentials
}

func (c *serverCreds) next() credentials.TransportCredentials {
	if c.tls != nil {
		return c.tls
	}
	return c.plain
}

func (c *serverCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if _, ok := conn.(internalConn); ok {
		return conn, internalAuthInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c.next().ServerHandshake(conn)
}

func (c *serverCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.next().ClientHandshake(ctx, authority, conn)
}

func (c *serverCreds) Info() credentials.ProtocolInfo { return c.next().Info() }

func (c *serverCreds) Clone() credentials.TransportCredentials {
	n := &serverCreds{}
	if c.tls != nil {
		n.tls = c.tls.Clone()
	} else {
		n.plain = c.plain.Clone()
	}
	return n
}

//lint:ignore SA1019 required by the interface
func (c *serverCreds) OverrideServerName(name string) error { return c.next().OverrideServerName(name) } //nolint:staticcheck
