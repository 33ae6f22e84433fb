package scheduler

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/platform"
)

// ShapeProperty is the platform property that names an action's shape
// outright, overriding the key derived from its command: actions with the
// same value (and instance and other platform properties) share one
// duration history. The scheduler takes it out of the platform before
// matching, so no worker needs to offer it.
const ShapeProperty = "gantry-action-shape"

// An action shape is what the scheduler learns durations for: actions
// that differ only in the files they read run for about as long. Its key
// is the instance, the platform (without ShapeProperty and SizeClassProperty: a run
// pinned to a class teaches the same shape), the mnemonic
// the client sent in its RequestMetadata (Bazel's "CppCompile"), and the
// command's arguments with the parts that change with the inputs
// normalised (normalizeArg). ShapeProperty, when set, replaces the
// mnemonic and the arguments.
type shapeKey struct {
	// ID is the key's digest, the history's record key.
	ID string
	// Label names the shape for people: the mnemonic (or override) and the
	// start of the normalised command line.
	Label string
}

// maxShapeLabel bounds a shape's label.
const maxShapeLabel = 160

// deriveShape is the shape of an action of instance with platform props
// (ShapeProperty still in it), the encoded Command cmd and mnemonic.
// A command that does not decode gives a shape of its bytes' digest:
// the action fails later, with its own error, where the Command is read.
func deriveShape(instance string, props platform.Properties, cmd []byte, mnemonic string) shapeKey {
	h := sha256.New()
	write := func(s string) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	write(instance)
	override := props.Values(ShapeProperty)
	write(props.Without([]string{ShapeProperty, SizeClassProperty}).Key())
	var label strings.Builder
	if len(override) > 0 {
		write("override")
		for _, v := range override {
			write(v)
		}
		label.WriteString(strings.Join(override, ","))
	} else {
		write(mnemonic)
		label.WriteString(mnemonic)
		c := &repb.Command{}
		if proto.Unmarshal(cmd, c) != nil {
			sum := sha256.Sum256(cmd)
			write("undecodable")
			write(string(sum[:]))
		} else {
			for i, a := range c.Arguments {
				n := normalizeArg(a)
				write(n)
				if i == 0 {
					n = path.Base(n)
				}
				if label.Len() < maxShapeLabel {
					if label.Len() > 0 {
						label.WriteByte(' ')
					}
					label.WriteString(n)
				}
			}
		}
	}
	l := label.String()
	if len(l) > maxShapeLabel {
		l = strings.ToValidUTF8(l[:maxShapeLabel], "") + "…"
	}
	return shapeKey{ID: hex.EncodeToString(h.Sum(nil)[:16]), Label: l}
}

// sourceExts are the extensions of source and object files: which file
// an action compiles changes its time far less than what kind of action
// it is, and a shape per file would never see a second sample.
var sourceExts = map[string]bool{
	"c": true, "cc": true, "cpp": true, "cxx": true, "h": true, "hh": true, "hpp": true, "o": true, "obj": true,
	"go": true, "java": true, "class": true, "rs": true, "py": true, "ts": true, "js": true, "d": true,
	"a": true, "so": true, "jar": true, "srcjar": true, "params": true,
}

// normalizeArg takes out of a command argument what depends on the
// inputs rather than on the kind of work. The argument is cut into
// tokens at whitespace, '=', ':' and ','; in each, a path to a source or
// object file becomes "_.ext", Bazel's configuration directory
// (bazel-out/k8-fastbuild/) "bazel-out/_/", a generated directory under
// /tmp/ or /var/folders/ "_", and a run of 16 or more hexadecimal digits
// (a content hash, a random name) "#". It runs on every submission: no
// regular expressions, and nothing allocated for a plain flag.
func normalizeArg(a string) string {
	if !strings.ContainsAny(a, "/.") && !hasLongHex(a) {
		return a
	}
	var b strings.Builder
	b.Grow(len(a))
	start := 0
	for i := 0; i <= len(a); i++ {
		if i < len(a) && !isTokenSep(a[i]) {
			continue
		}
		b.WriteString(normalizeToken(a[start:i]))
		if i < len(a) {
			b.WriteByte(a[i])
		}
		start = i + 1
	}
	return b.String()
}

func isTokenSep(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '=' || c == ':' || c == ','
}

func normalizeToken(t string) string {
	if dot := strings.LastIndexByte(t, '.'); dot >= 0 && dot > strings.LastIndexByte(t, '/') && sourceExts[t[dot+1:]] && dot > 0 {
		return "_." + t[dot+1:]
	}
	t = replaceSegment(t, "bazel-out/", "_")
	t = replaceSegment(t, "/tmp/", "_")
	t = replaceSegment(t, "/var/folders/", "_")
	if hasLongHex(t) {
		t = replaceLongHex(t)
	}
	return t
}

// replaceSegment replaces the path segment after every prefix in t
// with with.
func replaceSegment(t, prefix, with string) string {
	i := strings.Index(t, prefix)
	if i < 0 {
		return t
	}
	var b strings.Builder
	for i >= 0 {
		b.WriteString(t[:i+len(prefix)])
		t = t[i+len(prefix):]
		end := strings.IndexByte(t, '/')
		if end < 0 {
			end = len(t)
		}
		b.WriteString(with)
		t = t[end:]
		i = strings.Index(t, prefix)
	}
	b.WriteString(t)
	return b.String()
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// minHexRun is the shortest run of hexadecimal digits taken for a hash.
const minHexRun = 16

func hasLongHex(s string) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		if isHex(s[i]) {
			if run++; run >= minHexRun {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

func replaceLongHex(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && isHex(s[j]) {
			j++
		}
		switch {
		case j-i >= minHexRun:
			b.WriteByte('#')
		case j > i:
			b.WriteString(s[i:j])
		default:
			b.WriteByte(s[i])
			j = i + 1
		}
		i = j
	}
	return b.String()
}
