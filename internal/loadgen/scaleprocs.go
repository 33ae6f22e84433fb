package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// scaleWorkersReport is what a worker process writes on its stdout when
// it stops: every lease its workers took and how many results the
// scheduler accepted and refused.
type scaleWorkersReport struct {
	Leases   []scaleLease `json:"leases"`
	Accepted int          `json:"accepted"`
	Refused  int          `json:"refused"`
	Error    string       `json:"error,omitempty"`
}

// ServeScaleWorkers is a worker process of a scale run: it registers
// count workers (indexes first.. first+count-1, named prefix-INDEX) with
// slots slots each, waits for a line on gate before taking work, serves
// until gate ends (EOF) or ctx ends, and then writes its report as JSON
// on out. It writes the line "registered" on status once every worker is.
func ServeScaleWorkers(ctx context.Context, dial Dialer, server, prefix string, first, count, slots int, gate io.Reader, out, status io.Writer) error {
	conn, err := dial(server)
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	defer conn.Close()
	client := workerpb.NewWorkersClient(conn)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	workers := make([]*scaleWorker, count)
	intervals := make([]int64, count)
	var wg sync.WaitGroup
	for i := range workers {
		workers[i] = newScaleWorker(client, prefix+"-"+strconv.Itoa(first+i), scaleWorkerProperties(first+i), slots)
		wg.Add(1)
		go func() {
			defer wg.Done()
			iv, err := workers[i].register(ctx)
			if err != nil {
				cancel(err)
			}
			intervals[i] = int64(iv)
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	fmt.Fprintln(status, "registered") // the coordinator waits for this line

	open := make(chan struct{})
	go func() {
		r := bufio.NewReader(gate)
		if _, err := r.ReadString('\n'); err == nil {
			close(open)
			_, _ = io.Copy(io.Discard, r)
		}
		cancel(nil) // EOF: stop
	}()
	for i, w := range workers {
		wg.Add(2)
		go func() { defer wg.Done(); w.heartbeats(ctx, time.Duration(intervals[i])) }()
		go func() {
			defer wg.Done()
			if err := w.serve(ctx, open); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	rep := scaleWorkersReport{}
	for _, w := range workers {
		rep.Leases = append(rep.Leases, w.records...)
		rep.Accepted += w.accepted
		rep.Refused += w.refused
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		rep.Error = err.Error()
	}
	return json.NewEncoder(out).Encode(rep)
}

// workerProc is one worker process started by the coordinator.
type workerProc struct {
	cmd   *exec.Cmd
	gate  io.WriteCloser
	out   *os.File // the report
	ready chan error
}

// startWorkerProc starts binary as a worker process for workers
// first..first+count-1 and returns once they are registered.
func startWorkerProc(ctx context.Context, binary string, plan *ScalePlan, prefix string, first, count int, outPath string) (*workerProc, error) {
	out, err := os.Create(outPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, binary, "bench", "scale", "--worker-process",
		"--server", plan.Server, "--worker-prefix", prefix,
		"--first-worker", strconv.Itoa(first), "--workers", strconv.Itoa(count), "--slots", strconv.Itoa(plan.Slots))
	cmd.Stdout = out
	gate, err := cmd.StdinPipe()
	if err != nil {
		out.Close()
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		out.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting the worker process %s: %w", binary, err)
	}
	p := &workerProc{cmd: cmd, gate: gate, out: out, ready: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		var last string
		for sc.Scan() {
			if sc.Text() == "registered" {
				p.ready <- nil
				continue
			}
			last = sc.Text()
			fmt.Fprintf(os.Stderr, "worker process %d: %s\n", first, last)
		}
		p.ready <- fmt.Errorf("worker process for workers %d..%d ended before registering them: %s", first, first+count-1, last)
	}()
	return p, nil
}

// stop ends the process (EOF on its gate) and reads its report.
func (p *workerProc) stop() (*scaleWorkersReport, error) {
	p.gate.Close()
	err := p.cmd.Wait()
	defer p.out.Close()
	if err != nil {
		return nil, fmt.Errorf("worker process: %w", err)
	}
	if _, err := p.out.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	rep := &scaleWorkersReport{}
	if err := json.NewDecoder(p.out).Decode(rep); err != nil {
		return nil, fmt.Errorf("reading the worker process's report: %w", err)
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}
