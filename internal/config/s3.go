package config

import (
	"net/url"
	"time"
)

// S3Config is the bucket that holds the CAS and action cache when their
// backend is s3.
type S3Config struct {
	// Endpoint is the object store's URL, http://host:port or
	// https://host; empty means AWS S3.
	Endpoint string `yaml:"endpoint"`
	// Bucket is the bucket's name.
	Bucket string `yaml:"bucket"`
	// Prefix is prepended to every object name, so that several farms
	// can share a bucket.
	Prefix string `yaml:"prefix"`
	// Region is the bucket's region; empty lets the client find it out.
	Region string `yaml:"region"`
	// PathStyle addresses the bucket as endpoint/bucket (MinIO, Ceph)
	// instead of bucket.endpoint.
	PathStyle bool `yaml:"path_style"`
	// TLSCAFile is a PEM file of CAs to trust for an https endpoint.
	TLSCAFile string `yaml:"tls_ca_file"`
	// CredentialsFile is an AWS shared credentials file (profile from
	// AWS_PROFILE, else default); empty reads AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) from the environment.
	CredentialsFile string `yaml:"credentials_file"`
	// CreateBucket creates the bucket at start when it is missing.
	CreateBucket bool `yaml:"create_bucket"`
	// RefreshAfter is the age after which an object Gantry sees used is
	// copied onto itself, resetting its age for the bucket's expiry rule.
	RefreshAfter Duration `yaml:"refresh_after"`
	// ExpireAfter is the age at which the bucket's lifecycle rule deletes
	// objects (0: it never does). Gantry only checks that RefreshAfter is
	// well below it.
	ExpireAfter Duration `yaml:"expire_after"`
	// HeadConcurrency bounds the HEAD requests one FindMissingBlobs call
	// has in flight.
	HeadConcurrency int `yaml:"head_concurrency"`
	// ExistenceCacheEntries bounds the digests a frontend remembers as
	// present in the bucket (0: none).
	ExistenceCacheEntries int `yaml:"existence_cache_entries"`
	// PartSize is the size of multipart upload parts, and the size up to
	// which a blob is sent in one PUT.
	PartSize ByteSize `yaml:"part_size"`
	// StartWait is how long a starting process waits for an unreachable
	// bucket (connection refused, timeouts, 5xx) before it gives up;
	// refused credentials or a missing bucket fail at once.
	StartWait Duration `yaml:"start_wait"`
}

func defaultS3() S3Config {
	return S3Config{
		RefreshAfter:          Duration(24 * time.Hour),
		HeadConcurrency:       64,
		ExistenceCacheEntries: 1 << 20,
		PartSize:              16 << 20,
		StartWait:             Duration(time.Minute),
	}
}

// UsesS3 reports whether the CAS or the action cache is in a bucket.
func (s Storage) UsesS3() bool {
	return s.CAS.Backend == "s3" || s.ActionCache.Backend == "s3"
}

func validateS3(s S3Config, bad func(path, format string, args ...any)) {
	if s.Bucket == "" {
		bad("storage.s3.bucket", "the s3 backend needs a bucket name")
	}
	if s.Endpoint != "" {
		u, err := url.Parse(s.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			bad("storage.s3.endpoint", "%q is not an endpoint URL; write it as http://host:port or https://host, with no path (empty: AWS S3)", s.Endpoint)
		}
	}
	if s.Prefix != "" && s.Prefix[len(s.Prefix)-1] != '/' {
		bad("storage.s3.prefix", "%q must end in /", s.Prefix)
	}
	if s.RefreshAfter <= 0 {
		bad("storage.s3.refresh_after", "must be positive, e.g. 24h")
	}
	if s.ExpireAfter > 0 && s.RefreshAfter > s.ExpireAfter/2 {
		bad("storage.s3.refresh_after", "%s is more than half of expire_after (%s); a used object could expire before it is refreshed, so set it to at most a quarter", s.RefreshAfter, s.ExpireAfter)
	}
	if s.HeadConcurrency < 1 {
		bad("storage.s3.head_concurrency", "must be at least 1")
	}
	if s.ExistenceCacheEntries < 0 {
		bad("storage.s3.existence_cache_entries", "must not be negative (0 turns the cache off)")
	}
	if s.StartWait < 0 {
		bad("storage.s3.start_wait", "must not be negative (0 gives up at the first failure)")
	}
	if s.PartSize < 5<<20 || s.PartSize > 5<<30 {
		bad("storage.s3.part_size", "must be between 5MiB and 5GiB (S3's limits on a part)")
	}
}
