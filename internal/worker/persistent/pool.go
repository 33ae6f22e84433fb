package persistent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Config bounds a Pool.
type Config struct {
	// Dir holds the tool directories (emptied at start).
	Dir string
	// MaxPerKey bounds the processes of one key; MaxTotal all of them.
	MaxPerKey, MaxTotal int
	// MaxMultiplex bounds the requests in flight on one multiplex
	// process.
	MaxMultiplex int
	// IdleTimeout ends a process that served nothing for so long.
	IdleTimeout time.Duration
	// MinFreeMemory: while the host has less memory available (bytes,
	// MemAvailable), idle processes are ended, least recently used
	// first. 0 turns this off.
	MinFreeMemory int64
	Logger        *slog.Logger
}

// Spec says which process an action needs: actions with equal Specs
// share processes.
type Spec struct {
	// Key is the action's persistentWorkerKey (the client's hash of the
	// tool inputs); it names the key in metrics.
	Key string
	// Args start the tool (TOOL TOOL_ARGS...; the pool adds
	// --persistent_worker); Env is its whole environment.
	Args, Env []string
	// WorkingDirectory is the Command's, relative to the input root.
	WorkingDirectory string
	Protocol         Protocol
	// Multiplex: the tool takes many requests at once, each with its
	// request id and a sandbox_dir to resolve its paths in.
	Multiplex bool
	// Confiner, when set, confines the processes (the worker's sandbox);
	// ConfineKey tells confinements apart (the sandbox policy).
	Confiner   Confiner
	ConfineKey string
}

// id is the pool key: everything that makes two processes differ.
func (s *Spec) id() string {
	h := sha256.New()
	field := func(v string) { h.Write([]byte(strconv.Itoa(len(v)) + ":" + v)) }
	field(s.Key)
	field(s.Protocol.String())
	field(strconv.FormatBool(s.Multiplex))
	field(s.WorkingDirectory)
	field(strconv.FormatBool(s.Confiner != nil))
	field(s.ConfineKey)
	for _, list := range [][]string{s.Args, s.Env} {
		field(strconv.Itoa(len(list)))
		for _, v := range list {
			field(v)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Action is one request to run.
type Action struct {
	// ExecRoot is the action's materialized input root; its outputs are
	// collected from there as for any action.
	ExecRoot string
	// Tools are the tool inputs (relative to ExecRoot): a new process's
	// tool directory is laid out from them.
	Tools []string
	// Request holds the arguments (from the request file) and inputs.
	Request Request
	// Outputs are the paths the action may write, relative to ExecRoot.
	Outputs []string
	// Timeout bounds the request (0: none), time suspended excluded; on
	// expiry the process is killed.
	Timeout time.Duration
	// Started, when set, is called with the request's Control once it is
	// sent to a singleplex process (a multiplex process serves others at
	// the same time: it is neither suspended nor killed for one).
	Started func(Control)
}

// Outcome is how a request ended.
type Outcome struct {
	ExitCode int32
	Output   string
	// Warm: a process already running served it; Retried: its first
	// process died during the request; TimedOut: it was killed at
	// Action.Timeout; Killed: through its Control.
	Warm, Retried, TimedOut, Killed bool
	Duration                        time.Duration
}

// Pool keeps persistent worker processes, per Spec.
type Pool struct {
	cfg   Config
	st    Starter
	log   *slog.Logger
	stats *statsBook
	stop  context.CancelFunc
	done  chan struct{}

	mu      sync.Mutex
	keys    map[string]*keyPool
	total   int           // processes running or starting
	changed chan struct{} // closed (and replaced) when a process frees up or ends
	closed  bool
	seq     int
}

// keyPool holds the processes of one Spec.
type keyPool struct {
	id       string
	spec     Spec
	procs    []*process
	starting int
}

// NewPool starts a pool whose processes st starts; call Close at the end.
func NewPool(cfg Config, st Starter) (*Pool, error) {
	if cfg.MaxPerKey <= 0 || cfg.MaxTotal <= 0 {
		return nil, fmt.Errorf("persistent workers: max_per_key (%d) and max_total (%d) must be positive", cfg.MaxPerKey, cfg.MaxTotal)
	}
	if cfg.MaxMultiplex <= 0 {
		cfg.MaxMultiplex = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("clearing %s: %w", cfg.Dir, err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", cfg.Dir, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &Pool{cfg: cfg, st: st, log: cfg.Logger, stats: newStatsBook(), stop: stop, done: make(chan struct{}),
		keys: map[string]*keyPool{}, changed: make(chan struct{})}
	go p.evictLoop(ctx)
	return p, nil
}

// Close ends every process.
func (p *Pool) Close() {
	p.stop()
	<-p.done
	p.mu.Lock()
	p.closed = true
	var all []*process
	for _, k := range p.keys {
		for _, pr := range k.procs {
			pr.quiet = true
		}
		all = append(all, k.procs...)
	}
	p.mu.Unlock()
	for _, pr := range all {
		pr.kill(errors.New("the worker is shutting down"))
		<-pr.proc.Done()
	}
}

// ErrStart matches (errors.Is) the error Do returns when the tool could
// not be started: the action names a program that is not there, or
// its tool inputs cannot be laid out.
var ErrStart = errors.New("the persistent worker could not start")

// errDied marks a request whose process died under it.
var errDied = errors.New("persistent worker process died")

// Do runs act on a process for spec, starting one if none is free. A
// request whose process dies is retried once on a fresh process. Do
// returns an error when no process could run it (it could not start, or
// died twice, or ctx ended); the error says why.
func (p *Pool) Do(ctx context.Context, spec Spec, act Action) (Outcome, error) {
	id := spec.id()
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		pr, cold, err := p.acquire(ctx, id, &spec, &act)
		if err != nil {
			return Outcome{}, err
		}
		start := time.Now()
		o, err := p.run(ctx, pr, &spec, &act)
		o.Duration = time.Since(start)
		o.Warm = !cold
		o.Retried = attempt > 0
		p.release(pr, &spec, o, err, cold)
		if !errors.Is(err, errDied) {
			return o, err
		}
		last = err
		p.log.Warn("persistent worker process died during a request; retrying it on a fresh process", "key", spec.Key, "err", err)
	}
	return Outcome{}, fmt.Errorf("%w, and again on a fresh process; the tool crashes on this action or is broken: look at its stderr, or run the action without persistentWorkerKey (%v)", errDied, last)
}

// acquire finds a free process for id or starts one within the bounds,
// ending an idle process of another key if the total bound is reached.
func (p *Pool) acquire(ctx context.Context, id string, spec *Spec, act *Action) (*process, bool, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, false, errors.New("the worker is shutting down")
		}
		k := p.keys[id]
		if k == nil {
			k = &keyPool{id: id, spec: *spec}
			p.keys[id] = k
		}
		if pr := p.freeLocked(k, spec.Multiplex); pr != nil {
			pr.busy++
			p.mu.Unlock()
			return pr, false, nil
		}
		if len(k.procs)+k.starting < p.cfg.MaxPerKey {
			if p.total >= p.cfg.MaxTotal {
				if victim := p.leastRecentlyUsedIdleLocked(); victim != nil {
					p.removeLocked(victim)
					victim.quiet = true
					victim.kill(errors.New("ended to make room for another key (worker.persistent_workers.max_total)"))
					p.stats.evicted(victim.key.spec.Key)
				}
			}
			if p.total < p.cfg.MaxTotal {
				k.starting++
				p.total++
				p.seq++
				dir := filepath.Join(p.cfg.Dir, id[:12]+"-"+strconv.Itoa(p.seq))
				p.mu.Unlock()
				pr, err := p.start(k, dir, spec, act)
				p.mu.Lock()
				k.starting--
				if err != nil {
					p.total--
					if len(k.procs) == 0 && k.starting == 0 {
						delete(p.keys, id)
					}
					p.changedLocked()
					p.mu.Unlock()
					os.RemoveAll(dir)
					return nil, false, err
				}
				pr.busy = 1
				k.procs = append(k.procs, pr)
				p.mu.Unlock()
				return pr, true, nil
			}
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// start lays out a tool directory and starts a process in it.
func (p *Pool) start(k *keyPool, dir string, spec *Spec, act *Action) (*process, error) {
	if err := layOut(dir, act.ExecRoot, act.Tools); err != nil {
		return nil, fmt.Errorf("%w: preparing its tool directory: %w", ErrStart, err)
	}
	cwd := filepath.Join(dir, filepath.FromSlash(spec.WorkingDirectory))
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		return nil, err
	}
	pr, err := startProcess(p.st, k, dir, cwd, spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w; check the action's arguments (TOOL TOOL_ARGS... @REQUEST_FILE)", ErrStart, spec.Args[0], err)
	}
	p.stats.started(spec.Key)
	// Its tool directory goes when it ends.
	go func() {
		<-pr.proc.Done()
		p.mu.Lock()
		p.removeLocked(pr)
		quiet := pr.quiet
		p.mu.Unlock()
		p.stats.ended(spec.Key, quiet)
		os.RemoveAll(dir)
	}()
	return pr, nil
}

// freeLocked is a working process of k that can take a request.
func (p *Pool) freeLocked(k *keyPool, multiplex bool) *process {
	limit := 1
	if multiplex {
		limit = p.cfg.MaxMultiplex
	}
	for i := len(k.procs) - 1; i >= 0; i-- {
		if pr := k.procs[i]; pr.busy < limit && pr.err() == nil {
			return pr
		}
	}
	return nil
}

func (p *Pool) leastRecentlyUsedIdleLocked() *process {
	var lru *process
	for _, k := range p.keys {
		for _, pr := range k.procs {
			if pr.busy == 0 && (lru == nil || pr.lastUsed.Before(lru.lastUsed)) {
				lru = pr
			}
		}
	}
	return lru
}

// removeLocked takes pr out of the pool (once).
func (p *Pool) removeLocked(pr *process) {
	k := pr.key
	for i, q := range k.procs {
		if q == pr {
			k.procs = append(k.procs[:i], k.procs[i+1:]...)
			p.total--
			if len(k.procs) == 0 && k.starting == 0 {
				delete(p.keys, k.id)
			}
			p.changedLocked()
			return
		}
	}
}

func (p *Pool) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Pool) release(pr *process, spec *Spec, o Outcome, err error, cold bool) {
	p.mu.Lock()
	pr.busy--
	pr.lastUsed = time.Now()
	if err == nil {
		pr.served++
	}
	if pr.err() != nil {
		p.removeLocked(pr)
	}
	p.changedLocked()
	p.mu.Unlock()
	p.stats.request(spec.Key, o, err, cold, pr.started)
}
