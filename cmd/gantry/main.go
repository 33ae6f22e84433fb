// Command gantry is the one binary of the Gantry remote execution service.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		code := 1
		var st *exitStatus
		if errors.As(err, &st) {
			code, err = st.code, st.err
		}
		if wp := asWrongPort(err); wp != nil {
			err = wp // says it all, without the commands' context
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gantry:", err)
		}
		os.Exit(code)
	}
}

// exitStatus makes gantry exit with code (for example gantry run with the
// action's exit code), printing err first if it is not nil.
type exitStatus struct {
	code int
	err  error
}

func (e *exitStatus) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitStatus) Unwrap() error { return e.err }
