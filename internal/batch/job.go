package batch

import (
	"fmt"
	"strings"
	"time"
)

// Kind tells how a job's command is to be run.
type Kind int

const (
	// Command is a job with explicit inputs and outputs (a Gantry job
	// list): its remote spec is built from the Job's fields.
	Command Kind = iota
	// Compile is a compiler invocation from a compile_commands.json: its
	// inputs are found by the compiler launcher (internal/cc), which may
	// also decide that it runs locally.
	Compile
)

// Job is one command to run, as read from a job file.
type Job struct {
	// Name is unique among the jobs; Deps refer to it. For a compile it is
	// the output (or the source when the entry names no output).
	Name string
	Kind Kind
	// Args is the command line, already split.
	Args []string
	// Dir is the absolute directory the command runs in.
	Dir string
	// Inputs, Outputs and OutputDirs are paths as written in the file,
	// relative to Dir unless absolute. A Compile job has only its source
	// in Inputs (and its output in Outputs when the entry gives one).
	Inputs, Outputs, OutputDirs []string
	// Deps are the names of the jobs that must succeed before this one
	// starts (their outputs are typically its inputs).
	Deps []string
	// Platform and Env are NAME=VALUE, sorted.
	Platform, Env []string
	// Timeout is the execution timeout; 0 leaves it to the server.
	Timeout time.Duration
	// NoCache asks for no ActionCache lookup and no caching of the result.
	NoCache bool
	// Exclusive makes the job's Execute and Local steps take their token
	// exclusively: it runs alone on that resource (a link that needs all
	// the memory, a test that needs the machine).
	Exclusive bool
	// Line is the line of the job's definition in its file (0 if none).
	Line int
}

// checkJobs checks that names are unique and not empty, that every dep
// names a job, and that the deps have no cycle. The job file parsers make
// the same checks with line numbers; this is for jobs built in code.
func checkJobs(jobs []*Job) error {
	index := make(map[string]int, len(jobs))
	for i, j := range jobs {
		if j == nil {
			return fmt.Errorf("batch: job %d is nil", i)
		}
		if j.Name == "" {
			return fmt.Errorf("batch: job %d has no name", i)
		}
		if _, dup := index[j.Name]; dup {
			return fmt.Errorf("batch: two jobs are named %q; names must be unique", j.Name)
		}
		if len(j.Args) == 0 {
			return fmt.Errorf("batch: job %q has no command", j.Name)
		}
		index[j.Name] = i
	}
	for _, j := range jobs {
		for _, d := range j.Deps {
			if _, ok := index[d]; !ok {
				return fmt.Errorf("batch: job %q depends on %q, which is not a job", j.Name, d)
			}
		}
	}
	if c := findCycle(jobs, index); c != nil {
		return fmt.Errorf("batch: dependency cycle: %s", strings.Join(c, " -> "))
	}
	return nil
}

// findCycle returns a dependency cycle as the names along it, the first
// repeated at the end, or nil. Deps must all name jobs in index.
func findCycle(jobs []*Job, index map[string]int) []string {
	const (
		unseen = iota
		onPath
		finished
	)
	state := make([]int, len(jobs))
	var path []int
	var cycle []string
	var visit func(i int) bool
	visit = func(i int) bool {
		state[i] = onPath
		path = append(path, i)
		for _, d := range jobs[i].Deps {
			k := index[d]
			switch state[k] {
			case onPath:
				start := len(path) - 1
				for path[start] != k {
					start--
				}
				for _, p := range path[start:] {
					cycle = append(cycle, jobs[p].Name)
				}
				cycle = append(cycle, jobs[k].Name)
				return true
			case unseen:
				if visit(k) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		state[i] = finished
		return false
	}
	for i := range jobs {
		if state[i] == unseen && visit(i) {
			return cycle
		}
	}
	return nil
}
