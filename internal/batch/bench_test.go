package batch

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkRun measures the scheduler's own cost per job: jobs with a
// dependency each pass through all five remote queues with steps that do
// nothing. ns/op is per job.
func BenchmarkRun(b *testing.B) {
	step := StepFunc(func(context.Context, *Task) Result { return Result{} })
	steps := Steps{step, step, step, step, step, step}
	jobs := make([]*Job, b.N)
	for i := range jobs {
		jobs[i] = &Job{Name: fmt.Sprint(i), Args: []string{"cc"}}
		if i >= 10 {
			jobs[i].Deps = []string{fmt.Sprint(i - 10)}
		}
	}
	b.ResetTimer()
	s, err := New(jobs, steps, Limits{4, 16, 4, 2}, Options{Progress: NewPlain(discard{})})
	if err != nil {
		b.Fatal(err)
	}
	if sum := s.Run(context.Background()); !sum.OK() {
		b.Fatalf("%+v", sum)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
