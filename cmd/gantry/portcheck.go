package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/server"
)

// probeTimeout bounds the one HTTP request that checks what answers at a
// --server that does not speak gRPC.
const probeTimeout = 2 * time.Second

// wrongPortError says that a client command's server address is not a
// gRPC port, and which address to use if the server told. It keeps the
// code of the error it explains, so that callers deciding by code decide
// as before.
type wrongPortError struct {
	code codes.Code
	msg  string
}

func (e *wrongPortError) Error() string { return e.msg }

// GRPCStatus makes status.Code and status.Convert see the explanation.
func (e *wrongPortError) GRPCStatus() *status.Status { return status.New(e.code, e.msg) }

// asWrongPort returns the wrongPortError in err's chain, or nil. It is a
// full explanation by itself: main prints it without the context
// commands wrapped around it.
func asWrongPort(err error) error {
	var wp *wrongPortError
	if errors.As(err, &wp) {
		return wp
	}
	return nil
}

// portCheck turns the connection errors of one client connection that
// mean "this address does not speak gRPC" (HTTP/2 framing errors, TLS
// mismatches) into what to do about them. It asks the address once over
// plain HTTP(S): Gantry's HTTP port names its gRPC address in
// server.GRPCAddrHeader. The first such error decides for every later
// one of the connection.
type portCheck struct {
	addr string
	sec  client.Security

	once      sync.Once
	explained error // nil: nothing to add, the original error stands
}

// newPortCheck returns the check for a connection to addr made with sec.
func newPortCheck(addr string, sec client.Security) *portCheck {
	return &portCheck{addr: addr, sec: sec}
}

// dialOptions are the interceptors that apply the check to every call of
// the connection.
func (p *portCheck) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(p.unary), grpc.WithChainStreamInterceptor(p.stream)}
}

func (p *portCheck) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return p.explain(invoke(ctx, method, req, reply, cc, opts...))
}

func (p *portCheck) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, p.explain(err)
	}
	return checkedStream{ClientStream: s, check: p}, nil
}

// checkedStream applies the check to the errors of a stream's messages.
type checkedStream struct {
	grpc.ClientStream
	check *portCheck
}

func (s checkedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil || err == io.EOF {
		return err
	}
	return s.check.explain(err)
}

// mismatch is how a connection error says the other end is not a gRPC
// server of the expected kind.
type mismatch int

const (
	// noMismatch: any other error (refused, timed out, a call's own).
	noMismatch mismatch = iota
	// notHTTP2: the other end answered, but not in HTTP/2: surely not a
	// gRPC port (an HTTP/1 server answers "HTTP/1.1 400" to the preface).
	notHTTP2
	// maybeNotGRPC: TLS on one side only, no h2 in ALPN, or an HTTP/2
	// answer that is not gRPC (Gantry's HTTPS port speaks HTTP/2 and
	// answers 404): maybe a gRPC port with other TLS settings or behind
	// a proxy in trouble, maybe not a gRPC port.
	maybeNotGRPC
)

// classify sorts err by the words grpc-go and crypto/tls use.
func classify(err error) mismatch {
	if err == nil {
		return noMismatch
	}
	msg := err.Error()
	switch status.Code(err) {
	case codes.Unavailable:
		switch {
		case strings.Contains(msg, "error reading server preface"), strings.Contains(msg, "http2: frame too large"):
			return notHTTP2
		case strings.Contains(msg, "first record does not look like a TLS handshake"),
			strings.Contains(msg, "no application protocol"),
			strings.Contains(msg, "missing selected ALPN property"):
			return maybeNotGRPC
		}
	case codes.OK, codes.Canceled, codes.DeadlineExceeded:
		return noMismatch
	}
	if strings.Contains(msg, "unexpected HTTP status code received from server") || strings.Contains(msg, "received unexpected content-type") {
		return maybeNotGRPC
	}
	return noMismatch
}

// explain returns err, or what to do about it when it means the address
// does not speak gRPC.
func (p *portCheck) explain(err error) error {
	kind := classify(err)
	if kind == noMismatch {
		return err
	}
	p.once.Do(func() { p.explained = p.probe(kind, err) })
	if p.explained == nil {
		return err
	}
	return p.explained
}

// probe asks p.addr over HTTP whether it is Gantry's HTTP port.
func (p *portCheck) probe(kind mismatch, err error) error {
	if grpcAddr, ok := p.askHTTP(); ok {
		return &wrongPortError{code: status.Code(err), msg: fmt.Sprintf("%s is Gantry's HTTP port (status pages, metrics); the gRPC port is %s; use that address instead", p.addr, grpcAddr)}
	}
	if kind != notHTTP2 {
		// These errors also come from a gRPC port with the other TLS
		// setting or behind a proxy; their own message says more than a
		// guess would.
		return nil
	}
	desc := err.Error()
	if st, ok := status.FromError(err); ok {
		desc = st.Message()
	}
	return &wrongPortError{code: status.Code(err), msg: fmt.Sprintf("%s does not speak gRPC (%s); check --server or GANTRY_SERVER: it must be the gRPC address of Gantry (`gantry serve --listen`, %s by default)", p.addr, desc, builtinServer)}
}

// askHTTP GETs /healthz at p.addr (over TLS if p.sec asks for it, else
// plain) and returns the gRPC address Gantry's HTTP port names, with a
// wildcard host replaced by the host the user gave.
func (p *portCheck) askHTTP() (string, bool) {
	host, _, err := net.SplitHostPort(p.addr)
	if err != nil {
		return "", false // a gRPC target such as dns:///… or unix:…
	}
	scheme, transport := "http", &http.Transport{Proxy: nil}
	if p.sec.Enabled() {
		tc, err := p.sec.TLSConfig()
		if err != nil {
			return "", false
		}
		scheme, transport.TLSClientConfig = "https", tc
	}
	hc := &http.Client{Transport: transport, Timeout: probeTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(scheme + "://" + p.addr + "/healthz")
	if err != nil {
		return "", false
	}
	resp.Body.Close()
	grpcAddr := resp.Header.Get(server.GRPCAddrHeader)
	gh, gp, err := net.SplitHostPort(grpcAddr)
	if err != nil {
		return "", false
	}
	if ip := net.ParseIP(gh); gh == "" || ip != nil && ip.IsUnspecified() {
		gh = host
	}
	return net.JoinHostPort(gh, gp), true
}
