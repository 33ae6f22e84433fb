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

// mapFlags returns the flags that map the prefix rewritten (what the
// remote compiler sees) back to original (what the local compiler sees),
// composed with the user's own maps so that the result is what the local
// compile records: the user's last map matching original applies to the
// whole prefix, and the user's later maps of deeper prefixes follow,
// rewritten, so that they still win for their paths (gcc applies the last
// matching map, and only one). Without user maps it is one
// -ffile-prefix-map.
func mapFlags(rewritten, original string, user []prefixMap) []string {
	if len(user) == 0 {
		return []string{"-ffile-prefix-map=" + rewritten + "=" + original}
	}
	var flags []string
	for _, kind := range []struct {
		flag  string
		debug bool
	}{{"-fdebug-prefix-map=", true}, {"-fmacro-prefix-map=", false}} {
		applies := func(m prefixMap) bool { return kind.debug && m.debug || !kind.debug && m.macro }
		base, last := original, -1
		for i := len(user) - 1; i >= 0; i-- {
			if m := user[i]; applies(m) && strings.HasPrefix(original, m.old) {
				base, last = m.new+original[len(m.old):], i
				break
			}
		}
		flags = append(flags, kind.flag+rewritten+"="+base)
		for i := last + 1; i < len(user); i++ {
			if m := user[i]; applies(m) && len(m.old) > len(original) && strings.HasPrefix(m.old, original) {
				flags = append(flags, kind.flag+rewritten+m.old[len(original):]+"="+m.new)
			}
		}
	}
	return flags
}
