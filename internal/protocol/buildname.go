package protocol

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"
)

// BuildNameHeader is the request header in which a client names its build
// (its tool invocation) for people: Gantry's own commands send their
// command line ("gantry run -- make test"), which the builds page shows
// instead of the bare tool_invocation_id. REAPI has no field for it. The
// header is binary (-bin), so that any UTF-8 survives gRPC's ASCII-only
// text headers.
const BuildNameHeader = "gantry-build-name-bin"

// MaxBuildName bounds a build name, in bytes.
const MaxBuildName = 200

// BuildName is the build name a call's headers carry, as CleanBuildName
// makes it; "" when there is none.
func BuildName(md metadata.MD) string {
	vs := md.Get(BuildNameHeader)
	if len(vs) == 0 {
		return ""
	}
	return CleanBuildName(vs[0])
}

// CleanBuildName makes a build name (from a client) safe to keep and
// show: valid UTF-8, runs of white space and control characters (a
// newline or an escape would break a log line or a terminal) as one
// space, trimmed, at most MaxBuildName bytes (cut between characters,
// ending in "…").
func CleanBuildName(s string) string {
	var b strings.Builder
	space := false
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		if b.Len()+utf8.RuneLen(r) > MaxBuildName {
			return cut(b.String())
		}
		b.WriteRune(r)
	}
	return b.String()
}

// cut ends s, a name at its limit, in "…" within MaxBuildName bytes.
func cut(s string) string {
	const ellipsis = "…"
	for len(s)+len(ellipsis) > MaxBuildName {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return strings.TrimRight(s, " ") + ellipsis
}
