package batch_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gantry-build/gantry/internal/batch"
)

// A run with steps that only pretend: "gen" is a cache hit, "app" fails,
// so "pkg", which depends on it, is skipped.
func Example() {
	jobs, err := batch.ParseJobList([]byte(`
jobs:
  - {name: gen, command: ./gen.sh, outputs: [gen.h]}
  - {name: app, command: "cc -c app.c", inputs: [app.c, gen.h], deps: [gen]}
  - {name: pkg, command: [tar, cf, app.tar, app.o], deps: [app]}
`), "jobs.yaml", "/project")
	if err != nil {
		fmt.Println(err)
		return
	}
	pass := batch.StepFunc(func(ctx context.Context, t *batch.Task) batch.Result { return batch.Result{} })
	cache := batch.StepFunc(func(ctx context.Context, t *batch.Task) batch.Result {
		if t.Job.Name == "gen" {
			return batch.Result{Next: batch.SkipToDownload}
		}
		return batch.Result{}
	})
	execute := batch.StepFunc(func(ctx context.Context, t *batch.Task) batch.Result {
		if t.Job.Name == "app" {
			return batch.Result{Err: errors.New("exit code 1"), Output: []byte("app.c:3:1: error: expected ';'\n")}
		}
		return batch.Result{Stats: batch.Stats{BytesDown: 100}}
	})
	steps := batch.Steps{Scan: pass, Cache: cache, Upload: pass, Execute: execute, Download: pass, Local: pass}
	frozen := func() time.Time { return time.Unix(0, 0) } // so that the durations print as 0s
	s, err := batch.New(jobs, steps, batch.Limits{Uploads: 1, Executes: 1, Downloads: 1, Process: 1},
		batch.Options{KeepGoing: true, Progress: batch.NewPlain(os.Stdout), Clock: frozen, Tick: -1})
	if err != nil {
		fmt.Println(err)
		return
	}
	sum := s.Run(context.Background())
	sum.WriteTable(os.Stdout)
	// Output:
	// [1/3] done gen (cache hit)
	// [2/3] FAILED app (execute): exit code 1
	// app.c:3:1: error: expected ';'
	// [3/3] skipped pkg: it depends on app, which failed
	// ran 3 jobs in 0s: 1 succeeded (1 cache hits, 100.0%; 0 run locally), 1 failed, 1 skipped, 0 cancelled, 0 not run
	// uploaded 0 B in 0 blobs, downloaded 0 B in 0 blobs
	// queue      steps     time     mean failed
	// scan           2       0s       0s      0
	// cache          2       0s       0s      0
	// upload         1       0s       0s      0
	// execute        1       0s       0s      1
	// download       1       0s       0s      0
	// local          0       0s       0s      0
	// failed:
	//   app (execute): exit code 1
}
