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

// compdb returns a compile_commands.json of n entries.
func compdb(n int) []byte {
	var b []byte
	b = append(b, "[\n"...)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ",\n"...)
		}
		b = fmt.Appendf(b, `  {"directory": "/src/build", "file": "../lib/dir%d/file%d.c", "output": "obj/file%d.o",
   "command": "/usr/bin/gcc -DNDEBUG -I/src/include -I\"/src/with space\" -O2 -g -o obj/file%d.o -c ../lib/dir%d/file%d.c"}`, i%50, i, i, i, i%50, i)
	}
	return append(b, "\n]\n"...)
}

// BenchmarkParseCompileCommands: ns/op is per entry.
func BenchmarkParseCompileCommands(b *testing.B) {
	data := compdb(b.N)
	b.SetBytes(int64(len(data) / b.N))
	b.ResetTimer()
	jobs, err := ParseCompileCommands(data, "f", "/")
	if err != nil || len(jobs) != b.N {
		b.Fatal(err)
	}
}
