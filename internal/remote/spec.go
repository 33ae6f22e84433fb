// Package remote runs one command on a REAPI server from local files: it
// builds the input tree from local paths, looks the action up in the
// ActionCache, uploads what the CAS lacks, executes, and writes the outputs
// back into the local tree. It is the core of the client commands (`gantry
// run`, `gantry cc`, `gantry batch`); each step is its own method so that a
// batch runner can put the steps in separate queues.
package remote

import (
	"os"
	"time"
)

// Spec describes one command to run remotely, in local terms.
//
// The input root is the local directory LocalRoot: the command runs in
// WorkingDir (slash-separated, relative to the root, "" for the root
// itself), and outputs are written back under LocalRoot/WorkingDir.
type Spec struct {
	// Args is the command line; Args[0] is looked up on the worker's PATH
	// when it has no slash.
	Args []string
	// Env is the command's environment, as NAME=VALUE, in any order
	// (sorted by name when the Command is built, as REAPI requires).
	Env []string
	// LocalRoot is the absolute local directory the input root stands for.
	LocalRoot string
	// WorkingDir is the command's working directory relative to the input
	// root, slash-separated; "" is the root.
	WorkingDir string
	// Inputs are the files and directories the command reads.
	Inputs []Input
	// OutputFiles and OutputDirs are the outputs, relative to WorkingDir
	// (as REAPI's output_files and output_directories).
	OutputFiles []string
	OutputDirs  []string
	// Platform holds the platform properties, NAME=VALUE.
	Platform []string
	// Timeout is the action's execution timeout; 0 leaves it to the server.
	Timeout time.Duration
	// NoCache skips the ActionCache lookup and asks the server not to cache
	// the result.
	NoCache bool
	// Salt places the action in its own cache namespace (REAPI Action.salt),
	// for example to key it by the compiler's identity.
	Salt []byte
}

// Input is one file or directory of the input root.
type Input struct {
	// Local is the local path to read (absolute). A directory is added with
	// everything under it; symbolic links are followed.
	Local string
	// Path is where it goes in the input root: slash-separated, relative,
	// without "." or ".." elements.
	Path string
	// Info is os.Stat(Local) when the caller has just looked (an include
	// scanner does); nil makes Prepare look.
	Info os.FileInfo
}
