package persistent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/gantry-build/gantry/internal/worker/runner"
)

// Starter starts processes; the worker's runner.Supervisor is one, so a
// persistent process is contained, and ends with the worker, like any
// action's.
type Starter interface {
	Start(spec runner.Spec) (*runner.Process, error)
}

// process is one running persistent worker: its requests go to stdin and
// a reader goroutine hands each response to the request waiting for it.
type process struct {
	key     *keyPool
	dir     string // its tool directory
	cwd     string // its working directory (dir, or below it)
	stderr  *stderrTail
	conf    *Confinement // nil: not confined
	proto   Protocol
	proc    *runner.Process
	stdin   *os.File
	started time.Time

	wmu     sync.Mutex // one request written at a time
	mu      sync.Mutex
	pending map[int32]chan *Response
	nextID  int32
	broken  error // set once: the process is of no further use
	// Guarded by the pool's lock:
	busy     int       // requests in flight
	lastUsed time.Time // when the last request ended
	served   int       // requests answered
	quiet    bool      // ended idle (evicted), not broken
}

// startProcess starts argv (with --persistent_worker) in cwd.
func startProcess(st Starter, k *keyPool, dir, cwd string, spec *Spec) (*process, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			f.Close()
		}
		return nil, err
	}
	args := append(append([]string{}, spec.Args...), "--persistent_worker")
	rs := runner.Spec{Args: args, Env: spec.Env, Dir: cwd, StdinFile: inR, StdoutFile: outW, StderrFile: errW}
	var conf *Confinement
	if spec.Confiner != nil {
		if conf, err = spec.Confiner.Confine(dir, cwd); err == nil {
			rs.Wrapper, rs.UseCgroupFD, rs.CgroupFD, rs.Dir, rs.Mounts = conf.Wrapper, conf.UseCgroupFD, conf.CgroupFD, conf.Dir, conf.Mounts
		}
	}
	var proc *runner.Process
	if err == nil {
		proc, err = st.Start(rs)
	}
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		if conf != nil {
			conf.Finish()
		}
		return nil, err
	}
	stderr := newStderrTail(errR)
	p := &process{key: k, dir: dir, cwd: cwd, stderr: stderr, conf: conf, proto: spec.Protocol, proc: proc, stdin: inW,
		started: time.Now(), pending: map[int32]chan *Response{}}
	go p.readResponses(outR)
	go func() {
		res := proc.Wait()
		p.fail(fmt.Errorf("the persistent worker process exited (%s)", describeExit(res)))
		inW.Close()
		if conf != nil {
			conf.Finish() // kills what is left in its cgroup
		}
	}()
	return p, nil
}

func describeExit(r runner.Result) string {
	switch {
	case r.Cancelled:
		return "killed by the worker"
	case r.TimedOut:
		return "timed out"
	case r.Signal != 0:
		return "signal " + r.Signal.String()
	}
	return fmt.Sprintf("exit code %d", r.ExitCode)
}

// readResponses hands each response to its request, until the stream
// ends or breaks the protocol (which leaves the process of no use: there
// is no way to find the next message).
func (p *process) readResponses(out *os.File) {
	defer out.Close()
	rd := NewReader(out, p.proto)
	for {
		r, err := rd.ReadResponse()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the persistent worker process closed its stdout")
			}
			p.fail(err)
			p.proc.Cancel()
			return
		}
		p.mu.Lock()
		ch, ok := p.pending[r.RequestID]
		delete(p.pending, r.RequestID)
		p.mu.Unlock()
		if !ok {
			p.fail(fmt.Errorf("%w: a WorkResponse answers request %d, which is not pending", ErrProtocol, r.RequestID))
			p.proc.Cancel()
			return
		}
		ch <- r
	}
}

// fail marks the process broken (the first reason wins) and wakes every
// waiting request.
func (p *process) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken != nil {
		return
	}
	p.broken = err
	for id, ch := range p.pending {
		close(ch)
		delete(p.pending, id)
	}
}

// err is why the process broke (nil while it works).
func (p *process) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.broken
}

// send writes r with a fresh request id (0 for a singleplex process, as
// the protocol asks) and returns where its response arrives; the channel
// is closed if the process breaks first.
func (p *process) send(r *Request, multiplex bool) (<-chan *Response, int32, error) {
	p.mu.Lock()
	if p.broken != nil {
		p.mu.Unlock()
		return nil, 0, p.broken
	}
	id := int32(0)
	if multiplex {
		p.nextID++
		id = p.nextID
	}
	ch := make(chan *Response, 1)
	p.pending[id] = ch
	p.mu.Unlock()
	r.RequestID = id
	b, err := AppendRequest(nil, p.proto, r)
	if err == nil {
		// A pipe keeps one write whole only up to PIPE_BUF bytes.
		p.wmu.Lock()
		_, err = p.stdin.Write(b)
		p.wmu.Unlock()
	}
	if err != nil {
		p.fail(fmt.Errorf("writing a WorkRequest to the persistent worker: %w", err))
		return nil, 0, p.err()
	}
	return ch, id, nil
}

// kill ends the process (it breaks, waking its requests).
func (p *process) kill(why error) {
	p.fail(why)
	p.proc.Cancel()
}

// stderrTail is the end of what the process wrote to stderr, for error
// messages, once the process has ended (or after a short wait: a child
// it left may hold the pipe).
func (p *process) stderrTail() string {
	select {
	case <-p.stderr.done:
	case <-time.After(time.Second):
	}
	return p.stderr.String()
}
