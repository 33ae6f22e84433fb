package scheduler

import (
	"context"
	"fmt"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/statestore"
)

// compileCommand is a Bazel-like C++ compile of about 100 arguments
// (include paths, defines, warnings, the source and the output) for
// source file n.
func compileCommand(n int) []byte {
	args := []string{"/usr/bin/gcc", "-U_FORTIFY_SOURCE", "-fstack-protector", "-Wall", "-Wunused-but-set-parameter",
		"-Wno-free-nonheap-object", "-fno-omit-frame-pointer", "-std=c++17", "-MD", "-MF",
		fmt.Sprintf("bazel-out/k8-fastbuild/bin/pkg/_objs/lib/file%d.pic.d", n), "-frandom-seed=" + fmt.Sprintf("bazel-out/k8-fastbuild/bin/pkg/_objs/lib/file%d.pic.o", n), "-fPIC"}
	for i := range 40 {
		args = append(args, "-iquote", fmt.Sprintf("bazel-out/k8-fastbuild/bin/external/dep%d", i))
	}
	for i := range 10 {
		args = append(args, fmt.Sprintf("-DFEATURE_%d=1", i))
	}
	args = append(args, "-c", fmt.Sprintf("pkg/file%d.cc", n), "-o", fmt.Sprintf("bazel-out/k8-fastbuild/bin/pkg/_objs/lib/file%d.pic.o", n))
	return commandBytes(args...)
}

// BenchmarkShapeForSubmit is the shape work of one Submit for a
// 100-argument compile: "same-command" submits one Command again and
// again (a rebuild whose sources changed: the Command stays, the
// inputs move), "new-command" a different one every time.
// go test -run '^$' -bench ShapeForSubmit ./internal/scheduler
func BenchmarkShapeForSubmit(b *testing.B) {
	h, err := NewShapeHistory(context.Background(), statestore.NewMemory(), ShapeOptions{MaxShapes: 100}, nil)
	if err != nil {
		b.Fatal(err)
	}
	s := New(Config{Shapes: h, LongestFirst: LongestFirstAll}, nil, nil)
	meta := toolMetadata("bazel", "CppCompile")
	const distinct = 1 << 14
	cmds := make([][]byte, distinct)
	actions := make([]*repb.Action, distinct)
	for i := range cmds {
		cmds[i] = compileCommand(i)
		actions[i] = &repb.Action{CommandDigest: digest.Compute(digest.SHA256, cmds[i]).Proto()}
	}
	for _, tc := range []struct {
		name string
		of   func(i int) int
	}{
		{"same-command", func(int) int { return 0 }},
		{"new-command", func(i int) int { return i % distinct }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				k := tc.of(i)
				i++
				req := SubmitRequest{Instance: "main", Platform: linux, CommandBytes: cmds[k], Action: actions[k], Metadata: meta}
				if ts, _ := s.shapeForSubmit(&req); ts == nil {
					b.Fatal("no shape")
				}
			}
		})
	}
}
