// Package batch is the client-side scheduler of `gantry batch`: it runs
// many jobs (compiles from a compile_commands.json, or commands from a
// Gantry job list) through a chain of queues, as BuildStream's scheduler
// does, with resource tokens, dependencies and job control. It does no I/O
// of its own: the work of each queue is a Step the caller supplies (the
// command wires them to internal/remote and internal/cc).
//
// # Queues and tokens
//
// A job goes through Scan → Cache → Upload → Execute → Download. A step
// says where the job goes next (Result.Next): Continue to the next queue;
// SkipToDownload when the result is already known (a cache hit); or
// RunLocally to the Local queue, for a job the launcher will not send or
// a fallback after an infrastructure failure. A step that returns an error
// fails the job. A nil step passes every job through (for example Cache
// under --no-cache), except Local: a job sent there without a Local step
// fails.
//
// A step runs only while it holds a token of its queue's resource
// (Queue.Resource): Scan and Local take Process, Cache and Download take
// Downloads, Upload takes Uploads, Execute takes Executes; Limits gives the
// count of each. Tokens are shared, except for a Job.Exclusive job's
// Execute and Local steps, which run alone on their resource; while such a
// step waits, no new shared token of that resource is handed out, so it is
// not starved. When tokens free up, the queues are offered them last
// first (Local, Download, Execute, ..., Scan), each in arrival order, so
// work already far along drains before new work enters.
//
// A job enters Scan once all its Deps succeeded. When a job fails, every
// job that depends on it is skipped; without Options.KeepGoing no new job
// enters the chain either (the ones in it finish), as make does without -k.
//
// # Use
//
//	jobs, err := batch.ParseFile("compile_commands.json") // errors name file:line:col
//	s, err := batch.New(jobs, batch.Steps{
//		Scan:     scan,     // cc.Parse / remote.Prepare; store the action in t.Data
//		Cache:    lookup,   // remote.Lookup; SkipToDownload on a hit
//		Upload:   upload,   // remote.Upload
//		Execute:  execute,  // remote.Execute; Stats.CacheHit for a cached_result
//		Download: download, // remote.Download; Output = the job's stderr
//		Local:    local,    // run the command here
//	}, batch.Limits{Uploads: 4, Executes: 16, Downloads: 4, Process: runtime.NumCPU()},
//		batch.Options{KeepGoing: keepGoing, Progress: batch.NewDisplay(os.Stderr)})
//	sum := s.Run(ctx)
//	sum.WriteTable(os.Stderr) // or sum.WriteJSON(os.Stdout) for --json
//
// Each Step gets the job's *Task: Task.Job is the job, Task.Data is the
// steps' own slot for what one step hands the next (the prepared action,
// the ActionResult). Steps of one task never overlap, so Data needs no
// lock. Result.Stats (bytes and blobs moved, cache hit) are summed into the
// Summary; Result.Output (compiler messages) is shown by the display.
//
// # Job control
//
// Suspend (on SIGTSTP) stops dispatch until Resume (on SIGCONT); running
// steps go on, so the caller stops its local processes itself. Stop ends
// dispatch for good and Run returns once the running steps have returned.
// Cancelling the context given to Run does the same and also cancels the
// steps' context: that is the Ctrl-C path (steps then cancel their remote
// operations and return; a step that returns an error wrapping
// context.Canceled after the stop counts as cancelled, not failed). Run
// returns the Summary in every case: Summary.Stopped says it was cut
// short, Summary.OK that every job succeeded.
//
// # Job files
//
// ParseFile reads either format, told apart by the first character:
// ParseCompileCommands for a compile_commands.json (jobs of Kind Compile,
// to be handed to the compiler launcher) and ParseJobList for a Gantry job
// list in YAML or JSON (Kind Command, with explicit inputs and outputs; see
// ParseJobList for the fields). Errors are *FileError, naming the line and
// column and what is wrong.
//
// # Progress
//
// A Progress gets every Event with a Snapshot of the counts, from Run's
// goroutine. NewDisplay picks Terminal (a two-line block redrawn in place
// at most every 100ms, failures and output printed above it) on a terminal
// and Plain (one line per finished job) otherwise.
package batch
