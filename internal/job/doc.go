// Package job owns the life cycle of one remote job on the client: a
// compile for `gantry cc`, a compile or a command of `gantry batch`.
// The steps are the ones internal/batch calls (scan, cache, upload,
// execute, download, local): the spec of the action (the include scanner
// or the compiler's dependency listing for a compile, the job file for a
// command), the ActionCache lookup, the upload, Execute, the download,
// the re-listing after a compile fails on a header the scanner missed,
// the compiler's diagnostics mapped back to local paths, the dependency
// file, and telling the include scanner which files the job wrote.
//
// The package does the work through internal/remote and internal/cc; the
// commands in cmd/gantry keep their flags, signals and output. Batch is
// the step set of `gantry batch` (NewBatch; Batch.Steps for batch.New),
// Compile one compile of `gantry cc` (NewCompile, Compile.Run),
// LocalProcs the runner of the jobs that run here, and Operation remembers the remote operation a run started, so that Ctrl-C
// can cancel it.
package job
