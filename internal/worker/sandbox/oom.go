package sandbox

import (
	"bytes"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Exit is how a sandboxed action ended, as the worker saw it.
type Exit struct {
	// Code is the exit status. bwrap exits with 128+N when the action
	// was killed by signal N, so a status above 128 may stand for a
	// signal (or be the action's own choice).
	Code int
	// Signal is the signal that killed the process the worker started
	// (bwrap itself), or 0.
	Signal syscall.Signal
}

// There is no peak memory figure in the report: the rusage of bwrap's
// wait counts the resident size of the worker process it was forked
// from, which says nothing about the action.

// StderrTail is how much of the end of an action's stderr Explain looks
// at.
const StderrTail = 16 << 10

// Explain looks for signs that an action which failed by itself (the
// worker neither timed it out, cancelled it nor killed it for disk space)
// ran out of memory under the rlimit fallback, where no kernel counter
// records it. stderrTail is the end of the action's stderr.
//
// In cgroup mode it reports nothing: Finish reads memory.events, which
// counts out-of-memory kills exactly. Under the fallback the memory
// limit is RLIMIT_AS: reaching it makes the allocation fail (ENOMEM), the
// kernel kills nothing. So the evidence is what the program does about
// the failed allocation, and the message says how sure it is:
//
//   - "PROBABLY OUT OF MEMORY": a memory limit was set, the action
//     failed, and the end of its stderr reports an allocation failure.
//   - "POSSIBLY OUT OF MEMORY": a memory limit was set and the action
//     crashed (SIGSEGV, SIGBUS, SIGABRT) without saying why, as programs
//     that do not check allocations (or whose stack cannot grow) do; or
//     it was killed by a SIGKILL the worker did not send, which under the
//     fallback points at the kernel's out-of-memory killer acting for the
//     whole machine or container, not at the action's own limit.
//
// Anything else (exit 0, a plain failure, no memory limit for the first
// two) gets an empty Outcome.
func (a *Action) Explain(e Exit, stderrTail []byte) Outcome {
	if a.s.cgroup != "" || (e.Code == 0 && e.Signal == 0) {
		return Outcome{}
	}
	sig, how := e.Signal, ""
	switch {
	case sig != 0:
		how = "was killed by " + signalName(sig)
	case e.Code > 128 && e.Code < 128+65:
		sig = syscall.Signal(e.Code - 128)
		how = fmt.Sprintf("ended with status %d (as when killed by %s)", e.Code, signalName(sig))
	default:
		how = fmt.Sprintf("exited with status %d", e.Code)
	}
	raise := fmt.Sprintf("raise it with the platform property %s (up to worker.sandbox.max_memory_limit) or use less memory", PropMemoryLimit)
	if lim := a.pol.MemoryLimit; lim > 0 {
		if line := allocationFailure(stderrTail); line != "" {
			return Outcome{Suspected: true, Message: fmt.Sprintf("PROBABLY OUT OF MEMORY: the action's memory limit of %s was reached: it %s after reporting an allocation failure on stderr (%q). This worker enforces the limit as RLIMIT_AS, which counts address space reserved as well as used; %s",
				formatBytes(lim), how, line, raise)}
		}
		if sig == syscall.SIGSEGV || sig == syscall.SIGBUS || sig == syscall.SIGABRT {
			return Outcome{Suspected: true, Message: fmt.Sprintf("POSSIBLY OUT OF MEMORY: the action %s under a memory limit of %s without reporting why. Programs that do not check for failed allocations, or whose stack cannot grow, crash like this when they reach the limit (RLIMIT_AS on this worker, which counts address space reserved as well as used); if the action does not crash with a higher limit, %s",
				how, formatBytes(lim), raise)}
		}
	}
	if sig == syscall.SIGKILL {
		return Outcome{Suspected: true, Message: fmt.Sprintf("POSSIBLY OUT OF MEMORY: the action %s: a SIGKILL the worker did not send (no timeout, cancellation or disk guard). This worker's memory limit never kills (it makes allocations fail), so the likely sender is the kernel's out-of-memory killer acting for the whole machine or the worker's container (see the kernel log), unless the action killed itself",
			how)}
	}
	return Outcome{}
}

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

// allocationMessages are what programs print when an allocation fails
// (lower case): strerror(ENOMEM), glibc and gnulib, bash, the Go, Rust,
// C++, Python, Java and Node runtimes.
var allocationMessages = [][]byte{
	[]byte("cannot allocate"), []byte("can't allocate"), []byte("could not allocate"),
	[]byte("failed to allocate"), []byte("allocation failed"), []byte("memory allocation of"),
	[]byte("out of memory"), []byte("memory exhausted"), []byte("bad_alloc"),
	[]byte("memoryerror"), []byte("outofmemoryerror"), []byte("enomem"),
}

// allocationFailure returns the last line of stderr that reports a failed
// allocation, shortened, or "".
func allocationFailure(stderr []byte) string {
	for len(stderr) > 0 {
		i := bytes.LastIndexByte(stderr[:len(stderr)-1], '\n')
		line := bytes.TrimSpace(stderr[i+1:])
		stderr = stderr[:i+1]
		if len(line) == 0 {
			continue
		}
		lower := bytes.ToLower(line)
		for _, m := range allocationMessages {
			if bytes.Contains(lower, m) {
				return clipLine(string(line))
			}
		}
	}
	return ""
}

// clipLine bounds a quoted line of the action's output.
func clipLine(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// formatBytes writes n as bytes, with the binary unit it is a whole
// multiple of, if any (as memory-limit values are usually given).
func formatBytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d bytes (%d%s)", n, n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
