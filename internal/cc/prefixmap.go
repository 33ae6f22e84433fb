package cc

import (
	"fmt"
	"strings"
)

// prefixMap is one -f*-prefix-map=OLD=NEW flag.
type prefixMap struct {
	debug, macro bool // which paths it rewrites: debug info, __FILE__
	old, new     string
}

// parsePrefixMap reads a user's -ffile-prefix-map, -fdebug-prefix-map or
// -fmacro-prefix-map flag.
func parsePrefixMap(arg string) (prefixMap, error) {
	var m prefixMap
	var rest string
	switch {
	case strings.HasPrefix(arg, "-ffile-prefix-map="):
		m.debug, m.macro, rest = true, true, strings.TrimPrefix(arg, "-ffile-prefix-map=")
	case strings.HasPrefix(arg, "-fdebug-prefix-map="):
		m.debug, rest = true, strings.TrimPrefix(arg, "-fdebug-prefix-map=")
	case strings.HasPrefix(arg, "-fmacro-prefix-map="):
		m.macro, rest = true, strings.TrimPrefix(arg, "-fmacro-prefix-map=")
	default:
		return m, fmt.Errorf("unknown prefix map flag %s", arg)
	}
	// gcc splits at the first '=': the old prefix cannot contain one.
	i := strings.IndexByte(rest, '=')
	if i < 0 {
		return m, fmt.Errorf("flag %s has no '='", arg)
	}
	m.old, m.new = rest[:i], rest[i+1:]
	return m, nil
}

// applyMaps rewrites p with the last map of the kind that matches it, as
// gcc does (the last matching option wins; only one applies). ok is false
// when the launcher cannot express the result as a single prefix map for
// every path under p: a map whose prefix starts inside p would apply to
// some of them only.
func applyMaps(p string, maps []prefixMap, debug bool) (string, bool) {
	out := p
	for i := len(maps) - 1; i >= 0; i-- {
		m := maps[i]
		if debug && !m.debug || !debug && !m.macro {
			continue
		}
		if strings.HasPrefix(p, m.old) {
			out = m.new + p[len(m.old):]
			break
		}
	}
	for _, m := range maps {
		if (debug && m.debug || !debug && m.macro) && len(m.old) > len(p) && strings.HasPrefix(m.old, p) {
			return "", false
		}
	}
	return out, true
}

// mapFlags returns the flags that map the prefix rewritten (the path
// the remote compiler sees) back to original (what the local compiler
// would see), composed with the user's own maps so that the result is what
// the local compile records. Without user maps it is one -ffile-prefix-map.
func mapFlags(rewritten, original string, user []prefixMap) ([]string, error) {
	if len(user) == 0 {
		return []string{"-ffile-prefix-map=" + rewritten + "=" + original}, nil
	}
	d, ok1 := applyMaps(original, user, true)
	m, ok2 := applyMaps(original, user, false)
	if !ok1 || !ok2 {
		return nil, local("a -f*-prefix-map flag maps part of %s", original)
	}
	return []string{"-fdebug-prefix-map=" + rewritten + "=" + d, "-fmacro-prefix-map=" + rewritten + "=" + m}, nil
}
