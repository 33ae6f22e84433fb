// Command printversion prints version.String(), so that the tests can build
// it with the flags of each kind of build (ldflags, -buildvcs=false) without
// linking all of gantry.
package main

import (
	"fmt"

	"github.com/gantry-build/gantry/internal/version"
)

func main() { fmt.Print(version.String()) }
