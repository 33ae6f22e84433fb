package cc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gantry-build/gantry/internal/remote"
)

// Header modes: where the system headers (dependencies outside the
// project root) come from on the worker.
const (
	// HeadersSend puts them in the input root under SysrootDir and points
	// the compiler at it with --sysroot.
	HeadersSend = "send"
	// HeadersWorker sends nothing: the workers have the same headers.
	HeadersWorker = "worker"
)

// SysrootDir is the directory of the input root that mirrors the system
// headers in HeadersSend mode, named so that it cannot clash with a
// project's own files.
const SysrootDir = ".gantry-sysroot"

// DefaultRemotePath is the PATH of the remote compile.
const DefaultRemotePath = remote.DefaultPath

// Settings are the launcher's settings. A launcher takes no flags of its
// own (every argument is the compiler's), so they come from the
// environment: see SettingsFromEnv and docs/CONFIGURATION.md.
type Settings struct {
	// ProjectRoot, when set, is the input root instead of the deepest
	// common directory of the working directory and the project's files.
	ProjectRoot string
	// Headers is HeadersSend or HeadersWorker.
	Headers string
	// RemotePath is the PATH of the remote command.
	RemotePath string
	// Fallback runs the compile locally after an infrastructure failure.
	Fallback bool
	// Verbose says on stderr why a compile runs locally and how the
	// remote one went.
	Verbose bool
	// CacheDir holds the direct-mode dependency cache and the compiler
	// identities; "" disables both caches on disk.
	CacheDir string
	// CacheEntries bounds the number of direct-mode cache entries.
	CacheEntries int
	// Platform holds the remote platform properties, NAME=VALUE.
	Platform []string
	// Scanner finds a compile's inputs with the include scanner
	// (Options.Scanner) instead of the compiler's dependency listing when
	// no dependency file (-MD/-MMD) is asked for.
	Scanner bool
}

// SettingsFromEnv reads the GANTRY_CC_* variables (and GANTRY_CACHE_DIR)
// through getenv. Errors name the variable and the values it takes.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	s := Settings{
		Headers:      HeadersSend,
		RemotePath:   DefaultRemotePath,
		Fallback:     true,
		CacheEntries: 20000,
		Scanner:      true,
	}
	if v := getenv("GANTRY_CC_PROJECT_ROOT"); v != "" {
		if !filepath.IsAbs(v) {
			return s, fmt.Errorf("GANTRY_CC_PROJECT_ROOT=%q: must be an absolute directory", v)
		}
		s.ProjectRoot = filepath.Clean(v)
	}
	switch v := getenv("GANTRY_CC_HEADERS"); v {
	case "", HeadersSend:
	case HeadersWorker:
		s.Headers = HeadersWorker
	default:
		return s, fmt.Errorf("GANTRY_CC_HEADERS=%q: must be %q (send the system headers) or %q (the workers have them)", v, HeadersSend, HeadersWorker)
	}
	if v := getenv("GANTRY_CC_REMOTE_PATH"); v != "" {
		s.RemotePath = v
	}
	var err error
	if s.Fallback, err = envBool(getenv, "GANTRY_CC_FALLBACK", true); err != nil {
		return s, err
	}
	if s.Verbose, err = envBool(getenv, "GANTRY_CC_VERBOSE", false); err != nil {
		return s, err
	}
	if s.Scanner, err = envBool(getenv, "GANTRY_CC_SCANNER", true); err != nil {
		return s, err
	}
	switch v := getenv("GANTRY_CACHE_DIR"); v {
	case "":
		if d, err := os.UserCacheDir(); err == nil {
			s.CacheDir = filepath.Join(d, "gantry", "cc")
		}
	case "off":
	default:
		if !filepath.IsAbs(v) {
			return s, fmt.Errorf("GANTRY_CACHE_DIR=%q: must be an absolute directory (or \"off\")", v)
		}
		s.CacheDir = filepath.Join(filepath.Clean(v), "cc")
	}
	if v := getenv("GANTRY_CC_CACHE_ENTRIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return s, fmt.Errorf("GANTRY_CC_CACHE_ENTRIES=%q: must be a whole number of entries (0 turns the direct-mode cache off)", v)
		}
		s.CacheEntries = n
	}
	if v := getenv("GANTRY_CC_PLATFORM"); v != "" {
		for _, p := range strings.Split(v, ",") {
			if k, _, ok := strings.Cut(p, "="); !ok || k == "" {
				return s, fmt.Errorf("GANTRY_CC_PLATFORM=%q: must be NAME=VALUE pairs separated by commas, for example OSFamily=linux,ISA=x86-64", v)
			}
			s.Platform = append(s.Platform, p)
		}
	}
	return s, nil
}

func envBool(getenv func(string) string, name string, def bool) (bool, error) {
	switch v := strings.ToLower(getenv(name)); v {
	case "":
		return def, nil
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	default:
		return def, fmt.Errorf("%s=%q: must be true or false", name, v)
	}
}
