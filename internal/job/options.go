package job

import "github.com/gantry-build/gantry/internal/cc"

// CompileOptions are the options of a compile's Spec: the launcher's
// settings s, the environment env (os.Environ()) and the caches under
// s.CacheDir. A run of many compiles (gantry batch) passes perRun, so
// that the include scanner remembers files for the run (cc.NewScanner).
func CompileOptions(s cc.Settings, env []string, perRun bool) cc.Options {
	o := cc.Options{Settings: s, Env: env, Identities: cc.NewIdentities(s.CacheDir), Scanner: cc.NewScanner(s.CacheDir, perRun)}
	if s.CacheDir != "" && s.CacheEntries > 0 {
		o.Deps = cc.NewDepsCache(s.CacheDir, s.CacheEntries)
	}
	return o
}
