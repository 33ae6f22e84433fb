package execroot

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gantry-build/gantry/internal/digest"
)

// InvalidError reports an input tree or Command that breaks a rule of the
// Remote Execution API. Callers map it to INVALID_ARGUMENT: retrying the
// same action cannot succeed.
type InvalidError struct {
	// Path is the offending path relative to the input root ("" for the
	// root itself), or the output path or working directory as the
	// Command spells it.
	Path string
	// Rule says which rule was broken and what is expected instead.
	Rule string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid input for the action at %q: %s", e.Path, e.Rule)
}

func invalidf(path, format string, args ...any) *InvalidError {
	return &InvalidError{Path: path, Rule: fmt.Sprintf(format, args...)}
}

// MissingError lists blobs the input tree refers to that the CAS does not
// hold. Callers map it to FAILED_PRECONDITION with one MISSING violation per
// digest (subject "blobs/" + d.ResourceSegment()), so that the client
// uploads them and retries.
type MissingError struct {
	// Digests are the missing blobs, deduplicated and sorted.
	Digests []digest.Digest
}

func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d input blob(s) missing from the CAS; upload them and retry the action:", len(e.Digests))
	for i, d := range e.Digests {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(e.Digests)-i)
			break
		}
		b.WriteString(" ")
		b.WriteString(d.String())
	}
	return b.String()
}

// newMissing deduplicates and sorts ds into a MissingError.
func newMissing(ds []digest.Digest) *MissingError {
	seen := make(map[digest.Digest]bool, len(ds))
	var out []digest.Digest
	for _, d := range ds {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Hash != out[j].Hash {
			return out[i].Hash < out[j].Hash
		}
		return out[i].Size < out[j].Size
	})
	return &MissingError{Digests: out}
}
