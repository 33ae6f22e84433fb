package scheduler

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteInvocations prints the invocation trie as an indented table: per
// invocation its queued and executing counts (whole subtree), its share of
// its parent's executing actions, and the workers last used by it. keys
// name the levels.
func WriteInvocations(w io.Writer, keys []string, stats []InvocationStats) error {
	if len(keys) == 0 {
		fmt.Fprintln(w, "invocation keys: none (plain priority and FIFO)")
	} else {
		fmt.Fprintf(w, "invocation keys: %s\n", strings.Join(keys, " > "))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INVOCATION\tQUEUED\tEXECUTING\tSHARE\tWORKERS")
	// executing of each invocation's parent, by depth, for the share.
	parentExec := map[int]int{}
	for _, st := range stats {
		depth := len(st.Path)
		parentExec[depth+1] = st.Executing
		name := "(all)"
		if depth > 0 {
			name = st.Path[depth-1]
			if name == "" {
				name = "(none)"
			}
			if depth <= len(keys) {
				name = keys[depth-1] + "=" + name
			}
		}
		share := "-"
		if depth == 0 {
			share = "100%"
		} else if pe := parentExec[depth]; pe > 0 {
			share = fmt.Sprintf("%.0f%%", 100*float64(st.Executing)/float64(pe))
		}
		fmt.Fprintf(tw, "%s%s\t%d\t%d\t%s\t%d\n", strings.Repeat("  ", depth), name, st.Queued, st.Executing, share, st.Workers)
	}
	return tw.Flush()
}
