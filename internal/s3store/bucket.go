// Package s3store keeps the CAS and the action cache in an S3-compatible
// object store (AWS S3, MinIO, Ceph RGW, Google Cloud Storage's S3
// interface), so that any number of frontends share them and any one of
// them can die. The bucket is the durable truth: a write counts as done
// only when the bucket has it, and a blob becomes visible under its key
// only after its bytes were verified.
//
// Objects are laid out under the configured prefix as
//
//	cas/<digest function>/<hash>-<size>   blob bytes
//	ac/<sha256 of instance, action digest> a serialized ActionResult
//
// Expiry is the bucket's own lifecycle rule; Gantry copies the objects it
// sees used onto themselves once they are older than RefreshAfter, which
// resets their age, so that expiry behaves like least-recently-used.
package s3store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Config says where the bucket is and how to use it.
type Config struct {
	// Endpoint is the object store's URL (http://host:port or
	// https://host); empty means AWS S3.
	Endpoint string
	// Bucket is the bucket's name.
	Bucket string
	// Prefix is prepended to every object name ("" or ending in "/").
	Prefix string
	// Region is the bucket's region ("" lets the client find out).
	Region string
	// PathStyle addresses the bucket as endpoint/bucket rather than
	// bucket.endpoint (MinIO and most self-hosted stores want this).
	PathStyle bool
	// TLSCAFile is a PEM file of CA certificates to trust for an https
	// endpoint ("" trusts the system's).
	TLSCAFile string
	// CredentialsFile is an AWS shared credentials file; "" takes
	// credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and
	// AWS_SESSION_TOKEN), then ~/.aws/credentials, then the instance's IAM
	// role.
	CredentialsFile string
	// CreateBucket creates the bucket at start when it does not exist.
	CreateBucket bool
	// RefreshAfter is the age after which a used object is copied onto
	// itself to reset its age. It must be well below the bucket's expiry.
	RefreshAfter time.Duration
	// HeadConcurrency bounds the HEAD requests one FindMissing call has in
	// flight.
	HeadConcurrency int
	// ExistenceCacheEntries bounds the digests this process remembers as
	// present (0: remember none).
	ExistenceCacheEntries int
	// PartSize is the size of a multipart upload's parts, and the size up
	// to which a blob is buffered and sent in one PUT. An upload holds at
	// most two parts in memory.
	PartSize int64
	// MaxRetries bounds the retries of a failed request (0: the client
	// library's default, 10, with backoff).
	MaxRetries int
	// StartWait is how long Open waits for a bucket it cannot reach
	// (the store restarting: connection refused, timeouts, 5xx) before it
	// gives up; refused credentials and a missing bucket fail at once.
	// 0 gives up at the first failure.
	StartWait time.Duration
}

// Observer is told about every request the store makes: its operation
// (head, get, put, ...), its result (ok, not_found, error) and how long it
// took.
type Observer interface {
	Request(op, result string, took time.Duration)
}

// Unobserved is an Observer that discards everything.
type Unobserved struct{}

// Request implements Observer.
func (Unobserved) Request(string, string, time.Duration) {}

// Bucket is an open bucket. CAS and ActionCache are its two stores; Close
// stops the background refreshes.
type Bucket struct {
	client *minio.Client
	core   minio.Core
	cfg    Config
	where  string // endpoint and bucket, for messages
	obs    Observer
	log    *slog.Logger
	exist  *existence
	fresh  *refresher
}

// minPartSize is S3's smallest part but the last.
const minPartSize = 5 << 20

// Open connects to the bucket of cfg and checks, within startTimeout,
// that it exists (creating it if cfg.CreateBucket) and that the
// credentials are accepted. Its errors name the configuration key to fix.
func Open(ctx context.Context, cfg Config, obs Observer, log *slog.Logger) (*Bucket, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("storage.s3.bucket: empty; name the bucket that holds the CAS and action cache")
	}
	if cfg.PartSize < minPartSize {
		cfg.PartSize = minPartSize
	}
	if cfg.HeadConcurrency < 1 {
		cfg.HeadConcurrency = 1
	}
	host, secure, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	transport, err := newTransport(secure, cfg.TLSCAFile)
	if err != nil {
		return nil, err
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(host, &minio.Options{
		Creds:        credentialsFor(cfg.CredentialsFile),
		Secure:       secure,
		Region:       cfg.Region,
		BucketLookup: lookup,
		Transport:    transport,
		MaxRetries:   cfg.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("storage.s3.endpoint: %q: %w", cfg.Endpoint, err)
	}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	b := &Bucket{
		client: client,
		core:   minio.Core{Client: client},
		cfg:    cfg,
		where:  fmt.Sprintf("object storage %s://%s bucket %s", scheme, host, cfg.Bucket),
		obs:    obs,
		log:    log,
		exist:  newExistence(cfg.ExistenceCacheEntries),
	}
	if err := b.checkWaiting(ctx); err != nil {
		return nil, err
	}
	b.fresh = newRefresher(b, refreshWorkers, refreshQueue)
	return b, nil
}

// checkWaiting is check, tried again while the bucket is unreachable
// (a store restarting along with this process) for up to StartWait, each
// failure logged with what would be fatal after it.
func (b *Bucket) checkWaiting(ctx context.Context) error {
	deadline := time.Now().Add(b.cfg.StartWait)
	pause := 250 * time.Millisecond
	for {
		err := b.check(ctx)
		var u *unreachableError
		if !errors.As(err, &u) || time.Now().Add(pause).After(deadline) {
			return err
		}
		b.log.Warn("object storage unreachable at start; waiting for it", "err", err, "retry_in", pause, "gives_up_in", time.Until(deadline).Round(time.Second))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 4*time.Second)
	}
}

// unreachableError is a start-up check that failed for want of an answer
// (no connection, a timeout, a server error), which waiting may cure.
type unreachableError struct{ error }

func (e *unreachableError) Unwrap() error { return e.error }

// startTimeout bounds the start-up check of the bucket.
const startTimeout = 30 * time.Second

// check makes sure the bucket exists and the credentials work.
func (b *Bucket) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	start := time.Now()
	ok, err := b.client.BucketExists(ctx, b.cfg.Bucket)
	b.observe("bucket_exists", start, err)
	if err != nil {
		return b.startError(err)
	}
	if !ok {
		if !b.cfg.CreateBucket {
			return fmt.Errorf("storage.s3.bucket: bucket %q does not exist at %s; create it (and its expiry rule, see docs/OPERATIONS.md), or set storage.s3.create_bucket: true", b.cfg.Bucket, b.endpoint())
		}
		start = time.Now()
		err := b.client.MakeBucket(ctx, b.cfg.Bucket, minio.MakeBucketOptions{Region: b.cfg.Region})
		b.observe("make_bucket", start, err)
		if err != nil {
			return fmt.Errorf("storage.s3.create_bucket: creating bucket %q at %s: %w", b.cfg.Bucket, b.endpoint(), err)
		}
		b.log.Info("created the storage bucket", "bucket", b.cfg.Bucket, "endpoint", b.endpoint())
	}
	// A HEAD of a bucket does not prove that objects can be read: some
	// stores answer it without checking the signature. Ask for an object.
	start = time.Now()
	_, err = b.client.StatObject(ctx, b.cfg.Bucket, b.cfg.Prefix+"gantry-probe", minio.StatObjectOptions{})
	b.observe("head", start, err)
	if err != nil && !isNotFound(err) {
		return b.startError(err)
	}
	return nil
}

// startError explains a failed start-up check by its likely cause.
func (b *Bucket) startError(err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		switch {
		case resp.StatusCode == http.StatusForbidden || resp.Code == "AccessDenied" || resp.Code == "InvalidAccessKeyId" || resp.Code == "SignatureDoesNotMatch":
			return fmt.Errorf("storage.s3: %s refused Gantry's credentials (%s: %s); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in gantry's environment, or storage.s3.credentials_file, to a key that may read and write the bucket", b.where, resp.Code, resp.Message)
		case resp.Code == "NoSuchBucket":
			return fmt.Errorf("storage.s3.bucket: bucket %q does not exist at %s; create it, or set storage.s3.create_bucket: true", b.cfg.Bucket, b.endpoint())
		}
	}
	err = fmt.Errorf("storage.s3.endpoint: cannot use %s: %w; check that the endpoint is right and reachable", b.where, err)
	if errors.As(err, &resp) && resp.StatusCode > 0 && resp.StatusCode < 500 {
		return err // an answer, and not one that waiting changes
	}
	return &unreachableError{err}
}

// endpoint is the object store's address as configured, or AWS's.
func (b *Bucket) endpoint() string {
	if b.cfg.Endpoint == "" {
		return "AWS S3"
	}
	return b.cfg.Endpoint
}

// Close stops the background refreshes, waiting for those in flight.
func (b *Bucket) Close() { b.fresh.stop() }

// CAS returns the bucket's content-addressable store.
func (b *Bucket) CAS() *CAS { return &CAS{b: b} }

// ActionCache returns the bucket's action cache.
func (b *Bucket) ActionCache() *ActionCache { return &ActionCache{b: b} }

// observe reports one request to the observer.
func (b *Bucket) observe(op string, start time.Time, err error) {
	result := "ok"
	switch {
	case err == nil:
	case isNotFound(err):
		result = "not_found"
	default:
		result = "error"
	}
	b.obs.Request(op, result, time.Since(start))
}

// parseEndpoint splits a configured endpoint into host[:port] and
// whether it uses TLS.
func parseEndpoint(endpoint string) (host string, secure bool, err error) {
	if endpoint == "" {
		return "s3.amazonaws.com", true, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", false, fmt.Errorf("storage.s3.endpoint: %q is not an endpoint URL; write it as http://host:port or https://host, with no path", endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

// newTransport is the HTTP transport: many idle connections per host (a
// FindMissing call sends HEADs in parallel), and the configured CAs.
func newTransport(secure bool, caFile string) (*http.Transport, error) {
	t, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	t.MaxIdleConnsPerHost = 256
	t.MaxIdleConns = 512
	if caFile == "" {
		return t, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("storage.s3.tls_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("storage.s3.tls_ca_file: %s holds no PEM certificate", caFile)
	}
	if t.TLSClientConfig == nil {
		t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	t.TLSClientConfig.RootCAs = pool
	return t, nil
}

// credentialsFor is the credential chain: the file when one is given,
// else the environment, the default shared file, and the IAM role.
func credentialsFor(file string) *credentials.Credentials {
	if file != "" {
		return credentials.NewFileAWSCredentials(file, os.Getenv("AWS_PROFILE"))
	}
	return credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{},
	})
}

// objectName is the object named by parts under the prefix.
func (b *Bucket) objectName(parts ...string) string {
	return b.cfg.Prefix + strings.Join(parts, "/")
}
