// Package inputtree holds the bounds of an input tree that every part
// accepting one applies: Execute's validation (internal/execution), the
// worker that lays the tree out (internal/worker/execroot) and the Remote
// Asset API's archive unpacker (internal/asset). One definition, so that
// a tree one of them accepts, the others accept too. The same holds for
// where a Command's working directory and outputs lie (outputpath.go),
// which Execute and the worker's output collection apply alike.
package inputtree

import "fmt"

// MaxDepth bounds how deeply directories nest below the root: a file
// may sit under at most MaxDepth directories. Deeper trees cost the
// worker a path longer than the system's limit (PATH_MAX) and the
// scheduler a level of reads each.
const MaxDepth = 512

// MaxNameLength bounds the name of one file, directory or symbolic link,
// in bytes: the longest name the worker's file systems can create
// (NAME_MAX).
const MaxNameLength = 255

// CheckNameLength refuses a name longer than MaxNameLength, quoting
// only its start.
func CheckNameLength(name string) error {
	if len(name) <= MaxNameLength {
		return nil
	}
	return fmt.Errorf("name %q... is %d bytes long, more than the %d a file system allows (NAME_MAX); shorten it", name[:40], len(name), MaxNameLength)
}
