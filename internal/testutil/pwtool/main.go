// Command pwtool is a persistent worker tool for tests: each request
// copies an input file to an output file in upper case, and answers with
// its process id, uid, start time and how many requests it served, so a
// test sees which process ran an action, as whom, and whether it was warm.
//
// Started with --persistent_worker it serves WorkRequests on stdin
// (binary protobuf, or JSON with --json; concurrently with --multiplex);
// without it, it runs the one request of its @REQUEST_FILE argument, as a
// plain command (the protocol's fallback).
//
// Request arguments: --in FILE --out FILE, and --crash-once MARKER, which
// kills the process (SIGKILL) the first time, when MARKER does not exist
// yet (it creates it).
//
// Tool arguments (before the request file): --json, --multiplex,
// --startup-delay DURATION (a slow start, as a JVM's).
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/worker/persistent"
)

var (
	start    = time.Now()
	requests atomic.Int64
)

func main() {
	var persistentMode, multiplex bool
	proto := persistent.Proto
	var requestFile string
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--persistent_worker":
			persistentMode = true
		case a == "--json":
			proto = persistent.JSON
		case a == "--multiplex":
			multiplex = true
		case a == "--startup-delay" && i+1 < len(args):
			d, err := time.ParseDuration(args[i+1])
			if err != nil {
				fatal(err)
			}
			time.Sleep(d)
			i++
		case strings.HasPrefix(a, "@"):
			requestFile = a[1:]
		default:
			fatal(fmt.Errorf("unknown tool argument %q", a))
		}
	}
	if !persistentMode {
		b, err := os.ReadFile(requestFile)
		if err != nil {
			fatal(err)
		}
		code, out := handle(strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"), "")
		fmt.Fprint(os.Stderr, out)
		os.Exit(int(code))
	}
	serve(proto, multiplex)
}

func serve(proto persistent.Protocol, multiplex bool) {
	rd := persistent.NewReader(os.Stdin, proto)
	w := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	respond := func(r *persistent.Response) {
		mu.Lock()
		defer mu.Unlock()
		b, err := persistent.AppendResponse(nil, proto, r)
		if err != nil {
			fatal(err)
		}
		w.Write(b)
		if err := w.Flush(); err != nil {
			fatal(err)
		}
	}
	for {
		req, err := rd.ReadRequest()
		if err != nil {
			if errors.Is(err, io.EOF) {
				os.Exit(0)
			}
			fatal(err)
		}
		run := func() {
			code, out := handle(req.Arguments, req.SandboxDir)
			respond(&persistent.Response{ExitCode: code, Output: out, RequestID: req.RequestID})
		}
		if multiplex {
			go run()
		} else {
			run()
		}
	}
}

// handle runs one request; paths resolve in dir (the sandbox_dir, or the
// working directory).
func handle(args []string, dir string) (int32, string) {
	n := requests.Add(1)
	var in, out string
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--in":
			in = filepath.Join(dir, args[i+1])
		case "--out":
			out = filepath.Join(dir, args[i+1])
		case "--crash-once":
			if _, err := os.Stat(args[i+1]); errors.Is(err, os.ErrNotExist) {
				os.WriteFile(args[i+1], nil, 0o644)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return 1, fmt.Sprintf("pwtool: %v\n", err)
	}
	if err := os.WriteFile(out, []byte(strings.ToUpper(string(b))), 0o644); err != nil {
		return 1, fmt.Sprintf("pwtool: %v\n", err)
	}
	return 0, fmt.Sprintf("pid=%d uid=%d start=%d requests=%d\n", os.Getpid(), os.Getuid(), start.UnixNano(), n)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "pwtool:", err)
	os.Exit(2)
}
