package config

import (
	"net/netip"
	"os"
	"strings"
	"time"
)

// RemoteAssetConfig configures the Remote Asset API (Fetch and Push,
// Bazel's --experimental_remote_downloader), served with the CAS.
type RemoteAssetConfig struct {
	// Enabled serves the Fetch and Push services.
	Enabled bool `yaml:"enabled"`
	// MaxSize bounds one download.
	MaxSize ByteSize `yaml:"max_size"`
	// ConnectTimeout, HeaderTimeout and IdleTimeout bound connecting to
	// an origin, waiting for its headers, and a body that stalls.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	HeaderTimeout  Duration `yaml:"header_timeout"`
	IdleTimeout    Duration `yaml:"idle_timeout"`
	// DefaultTimeout is a fetch's deadline when the request gives none;
	// MaxTimeout caps the one it gives.
	DefaultTimeout Duration `yaml:"default_timeout"`
	MaxTimeout     Duration `yaml:"max_timeout"`
	// MaxRedirects bounds the redirects one fetch follows.
	MaxRedirects int `yaml:"max_redirects"`
	// TLSCAFile adds CA certificates (PEM) to the system's for origins.
	TLSCAFile string `yaml:"tls_ca_file"`
	// PerHostConcurrency bounds simultaneous downloads from one origin.
	PerHostConcurrency int `yaml:"per_host_concurrency"`
	// AllowHosts lets fetches reach loopback, private and link-local
	// addresses: host names, *.domain wildcards, IP addresses, CIDRs.
	AllowHosts []string `yaml:"allow_hosts"`
	// MaxArchiveExpandedSize and MaxArchiveEntries bound an unpacked
	// archive (FetchDirectory).
	MaxArchiveExpandedSize ByteSize `yaml:"max_archive_expanded_size"`
	MaxArchiveEntries      int      `yaml:"max_archive_entries"`
	// TempDir holds downloads larger than 4 MiB on their way to the CAS
	// ("": the system's temporary directory).
	TempDir string `yaml:"temp_dir"`
}

func defaultRemoteAsset() RemoteAssetConfig {
	return RemoteAssetConfig{
		Enabled:                true,
		MaxSize:                4 << 30,
		ConnectTimeout:         Duration(10 * time.Second),
		HeaderTimeout:          Duration(60 * time.Second),
		IdleTimeout:            Duration(60 * time.Second),
		DefaultTimeout:         Duration(10 * time.Minute),
		MaxTimeout:             Duration(time.Hour),
		MaxRedirects:           10,
		PerHostConcurrency:     8,
		MaxArchiveExpandedSize: 16 << 30,
		MaxArchiveEntries:      1_000_000,
	}
}

func validateRemoteAsset(c RemoteAssetConfig, bad func(path, format string, args ...any)) {
	if !c.Enabled {
		return
	}
	if c.MaxSize <= 0 {
		bad("remote_asset.max_size", "must be positive, such as 4GiB")
	}
	for path, d := range map[string]Duration{"remote_asset.connect_timeout": c.ConnectTimeout, "remote_asset.header_timeout": c.HeaderTimeout, "remote_asset.idle_timeout": c.IdleTimeout, "remote_asset.default_timeout": c.DefaultTimeout} {
		if d <= 0 {
			bad(path, "must be positive, such as 30s")
		}
	}
	if c.MaxTimeout < c.DefaultTimeout {
		bad("remote_asset.max_timeout", "%v is below remote_asset.default_timeout (%v)", c.MaxTimeout.D(), c.DefaultTimeout.D())
	}
	if c.MaxRedirects < 0 || c.MaxRedirects > 100 {
		bad("remote_asset.max_redirects", "%d: use 0 (no redirects) to 100", c.MaxRedirects)
	}
	if c.PerHostConcurrency < 1 {
		bad("remote_asset.per_host_concurrency", "must be at least 1")
	}
	if c.MaxArchiveExpandedSize <= 0 {
		bad("remote_asset.max_archive_expanded_size", "must be positive, such as 16GiB")
	}
	if c.MaxArchiveEntries < 1 {
		bad("remote_asset.max_archive_entries", "must be at least 1")
	}
	if c.TLSCAFile != "" {
		if _, err := os.Stat(c.TLSCAFile); err != nil {
			bad("remote_asset.tls_ca_file", "%v", err)
		}
	}
	for i, h := range c.AllowHosts {
		if !validAllowHost(h) {
			bad("remote_asset.allow_hosts", "entry %d, %q, is neither a host name, a *.domain wildcard, an IP address nor a CIDR prefix", i, h)
		}
	}
}

// validAllowHost is asset.NewGuard's rule, checked here so that a bad
// entry fails at start with its key.
func validAllowHost(h string) bool {
	if _, err := netip.ParsePrefix(h); err == nil {
		return true
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	return h != "" && !strings.ContainsAny(h, "/: ") && !strings.Contains(strings.TrimPrefix(h, "*."), "*")
}
