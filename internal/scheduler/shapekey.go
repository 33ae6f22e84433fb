package scheduler

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"regexp"
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
// is the instance, the platform (without ShapeProperty), the mnemonic
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
	write(props.Without([]string{ShapeProperty}).Key())
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

var (
	// bazelOutConfig is the configuration directory of Bazel's output
	// tree (bazel-out/k8-fastbuild/bin): it changes with the build's
	// options, not with what an action does.
	bazelOutConfig = regexp.MustCompile(`bazel-out/[^/]+/`)
	// longHex is a run of 16 or more hexadecimal digits: a content hash
	// or a random name, which differs for every input.
	longHex = regexp.MustCompile(`[0-9a-fA-F]{16,}`)
	// tempDir is a temporary directory with a generated name.
	tempDir = regexp.MustCompile(`(/tmp/|/var/folders/)[^/\s]+`)
	// sourceFile is a path to a source or object file: which file an
	// action compiles changes its time far less than what kind of action
	// it is, and a shape per file would never see a second sample.
	sourceFile = regexp.MustCompile(`(?:[^\s=:,]*/)?[^\s=:,/]+\.(c|cc|cpp|cxx|h|hh|hpp|o|obj|go|java|class|rs|py|ts|js|d|a|so|jar|srcjar|params)\b`)
)

// normalizeArg takes out of a command argument what depends on the
// inputs rather than on the kind of work: Bazel's configuration directory,
// long hexadecimal runs, generated temporary directories, and the paths
// of source and object files (each becomes its extension).
func normalizeArg(a string) string {
	a = bazelOutConfig.ReplaceAllString(a, "bazel-out/_/")
	a = longHex.ReplaceAllString(a, "#")
	a = tempDir.ReplaceAllString(a, "${1}_")
	a = sourceFile.ReplaceAllString(a, "_.$1")
	return a
}
