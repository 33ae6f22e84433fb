package asset

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
)

// FetcherConfig tunes the HTTP client of the fetcher.
type FetcherConfig struct {
	// ConnectTimeout bounds a TCP connection (and TLS handshake).
	ConnectTimeout time.Duration
	// HeaderTimeout bounds the wait for the response headers.
	HeaderTimeout time.Duration
	// IdleTimeout aborts a body that sends nothing for this long.
	IdleTimeout time.Duration
	// MaxRedirects is how many redirects one fetch follows.
	MaxRedirects int
	// MaxSize bounds a download's bytes.
	MaxSize int64
	// TLSCAFile adds PEM CA certificates to the system's.
	TLSCAFile string
	// PerHostConcurrency bounds simultaneous downloads from one host.
	PerHostConcurrency int
	// Guard decides which addresses may be dialled.
	Guard *Guard
	// Proxy picks a proxy for a request (http.ProxyFromEnvironment in
	// production; nil: none).
	Proxy func(*http.Request) (*url.URL, error)
}

// FetchError is a download that failed for a reason outside the
// server: Code is the gRPC code the client gets.
type FetchError struct {
	URI  string
	Code codes.Code
	Msg  string
}

func (e *FetchError) Error() string { return fmt.Sprintf("fetching %s: %s", e.URI, e.Msg) }

// Fetcher downloads URIs over HTTP(S).
type Fetcher struct {
	cfg    FetcherConfig
	client *http.Client
	mu     sync.Mutex
	hosts  map[string]chan struct{}
}

// NewFetcher builds the HTTP client of cfg.
func NewFetcher(cfg FetcherConfig) (*Fetcher, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if cfg.TLSCAFile != "" {
		pem, err := os.ReadFile(cfg.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("remote_asset.tls_ca_file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("remote_asset.tls_ca_file: %s holds no PEM certificate", cfg.TLSCAFile)
		}
	}
	if cfg.Guard == nil {
		cfg.Guard, _ = NewGuard(nil)
	}
	if cfg.PerHostConcurrency <= 0 {
		cfg.PerHostConcurrency = 1
	}
	f := &Fetcher{cfg: cfg, hosts: map[string]chan struct{}{}}
	tr := &http.Transport{
		Proxy:                 f.proxy,
		DialContext:           f.dial,
		TLSClientConfig:       &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ResponseHeaderTimeout: cfg.HeaderTimeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   cfg.PerHostConcurrency,
		ForceAttemptHTTP2:     true,
	}
	f.client = &http.Client{Transport: tr, CheckRedirect: f.checkRedirect}
	return f, nil
}

// proxy returns the proxy of req, after checking req's own host: behind a
// proxy the dial goes to the proxy, so the guard checks the target here.
func (f *Fetcher) proxy(req *http.Request) (*url.URL, error) {
	if f.cfg.Proxy == nil {
		return nil, nil
	}
	u, err := f.cfg.Proxy(req)
	if u == nil || err != nil {
		return u, err
	}
	if err := f.cfg.Guard.CheckHost(req.Context(), req.URL.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}

// dial connects with the connect timeout; the guard checks the address
// actually dialled, after resolution. A proxy (chosen by the operator)
// is trusted.
func (f *Fetcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	trusted := f.isProxy(addr)
	if !trusted {
		// Before the resolver, which would take 127.1 for a name.
		if err := f.cfg.Guard.checkSpelling(host); err != nil {
			return nil, err
		}
	}
	d := net.Dialer{Timeout: f.cfg.ConnectTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		if trusted {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		return f.cfg.Guard.Check(host, ap.Addr())
	}}
	return d.DialContext(ctx, network, addr)
}

// isProxy reports whether addr (host:port) is a configured proxy's. The
// proxy is asked with a probe request for a public host.
func (f *Fetcher) isProxy(addr string) bool {
	if f.cfg.Proxy == nil {
		return false
	}
	for _, scheme := range []string{"http", "https"} {
		req := &http.Request{URL: &url.URL{Scheme: scheme, Host: "example.com"}}
		u, err := f.cfg.Proxy(req)
		if err != nil || u == nil {
			continue
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443", "socks5": "1080"}[u.Scheme]
		}
		if net.JoinHostPort(u.Hostname(), port) == addr {
			return true
		}
	}
	return false
}

func (f *Fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return fmt.Errorf("redirected to %s, which is not http or https", req.URL.Redacted())
	}
	for _, v := range via {
		if v.URL.String() == req.URL.String() {
			return fmt.Errorf("redirect loop: %s redirects back to itself", req.URL.Redacted())
		}
	}
	if len(via) > f.cfg.MaxRedirects {
		return fmt.Errorf("stopped after %d redirects (remote_asset.max_redirects)", f.cfg.MaxRedirects)
	}
	return nil
}

// acquire takes one of host's download slots.
func (f *Fetcher) acquire(ctx context.Context, host string) (func(), error) {
	f.mu.Lock()
	sem, ok := f.hosts[host]
	if !ok {
		sem = make(chan struct{}, f.cfg.PerHostConcurrency)
		f.hosts[host] = sem
	}
	f.mu.Unlock()
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// redact hides a password in uri (https://user:pass@host/...) for
// messages, logs and the index, which must not hold credentials.
func redact(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return "(a URI that does not parse)"
	}
	return u.Redacted()
}

// downloadable reports whether uri names something the fetcher can
// download: its scheme (RFC 3986: a letter, then letters, digits, "+",
// "-" or "."; before the first ":") is http or https, in any case. Other
// URIs (urn:, file:, a bare name) can only have been pushed.
func downloadable(uri string) bool {
	for i := 0; i < len(uri); i++ {
		c := uri[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && c == ':':
			scheme := strings.ToLower(uri[:i])
			return scheme == "http" || scheme == "https"
		default:
			return false
		}
	}
	return false
}

// Fetch downloads uri into w, sending header, and returns the bytes
// written. Failures are *FetchError.
func (f *Fetcher) Fetch(ctx context.Context, uri string, header http.Header, w io.Writer) (int64, error) {
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return 0, &FetchError{redact(uri), codes.InvalidArgument, "not an http or https URL; Gantry fetches only those"}
	}
	fail := func(code codes.Code, format string, args ...any) (int64, error) {
		return 0, &FetchError{u.Redacted(), code, fmt.Sprintf(format, args...)}
	}
	release, err := f.acquire(ctx, u.Host)
	if err != nil {
		return fail(codes.DeadlineExceeded, "waiting for a free download slot for %s: %v", u.Host, err)
	}
	defer release()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return fail(codes.InvalidArgument, "%v", err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, f.transportError(u, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return fail(codes.NotFound, "the origin answered %s", resp.Status)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fail(codes.PermissionDenied, "the origin answered %s; check the credentials Bazel sends (.netrc, auth patterns)", resp.Status)
	case resp.StatusCode/100 == 3:
		return fail(codes.Unavailable, "the origin answered %s without a usable Location", resp.Status)
	case resp.StatusCode != http.StatusOK:
		return fail(codes.Unavailable, "the origin answered %s", resp.Status)
	}
	if resp.ContentLength > f.cfg.MaxSize {
		return fail(codes.ResourceExhausted, "the origin announces %d bytes, more than remote_asset.max_size (%d)", resp.ContentLength, f.cfg.MaxSize)
	}
	idle := time.AfterFunc(f.cfg.IdleTimeout, func() {
		cancel(fmt.Errorf("the origin sent nothing for %v (remote_asset.idle_timeout)", f.cfg.IdleTimeout))
	})
	defer idle.Stop()
	body := &idleReader{r: io.LimitReader(resp.Body, f.cfg.MaxSize+1), t: idle, d: f.cfg.IdleTimeout}
	n, err := io.Copy(w, body)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return fail(codes.DeadlineExceeded, "%v after %d bytes", cause, n)
		}
		return 0, f.transportError(u, err)
	}
	if n > f.cfg.MaxSize {
		return fail(codes.ResourceExhausted, "the body is larger than remote_asset.max_size (%d bytes)", f.cfg.MaxSize)
	}
	return n, nil
}

func (f *Fetcher) transportError(u *url.URL, err error) error {
	var fe *ForbiddenError
	var se *HostSpellingError
	code := codes.Unavailable
	switch {
	case errors.As(err, &fe):
		code = codes.PermissionDenied
	case errors.As(err, &se):
		code = codes.InvalidArgument
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is already in the message
	}
	return &FetchError{u.Redacted(), code, err.Error()}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// idleReader pushes the idle deadline back on every read that returns
// bytes.
type idleReader struct {
	r io.Reader
	t *time.Timer
	d time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.t.Reset(r.d)
	}
	return n, err
}
