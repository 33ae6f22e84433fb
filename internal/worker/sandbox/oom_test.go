package sandbox

import (
	"strings"
	"syscall"
	"testing"
)

func TestExplain(t *testing.T) {
	fallback := &Sandbox{}
	withLimit := &Action{s: fallback, pol: Policy{MemoryLimit: 16 << 20}}
	noLimit := &Action{s: fallback}
	cgroup := &Action{s: &Sandbox{cgroup: "/sys/fs/cgroup/x"}, pol: Policy{MemoryLimit: 16 << 20}}
	bashOOM := []byte("starting\nbash: xrealloc: cannot allocate 12000128 bytes\n")
	tests := []struct {
		name   string
		a      *Action
		exit   Exit
		stderr []byte
		want   []string // substrings of the message; nil: no message
	}{
		{"allocation failure", withLimit, Exit{Code: 2}, bashOOM,
			[]string{"PROBABLY OUT OF MEMORY", "memory limit of 16777216 bytes (16MiB) was reached", "exited with status 2", "xrealloc: cannot allocate 12000128 bytes", PropMemoryLimit, "RLIMIT_AS"}},
		{"python", withLimit, Exit{Code: 1}, []byte("Traceback (most recent call last):\n  File \"x.py\"\nMemoryError\n"), []string{"PROBABLY", `"MemoryError"`}},
		{"c++ abort", withLimit, Exit{Code: 134}, []byte("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc"),
			[]string{"PROBABLY", "status 134 (as when killed by SIGABRT)", "what():  std::bad_alloc"}},
		{"go runtime", withLimit, Exit{Code: 2}, []byte("fatal error: runtime: out of memory\n\ngoroutine 1 [running]:\nmain.main()\n"), []string{"PROBABLY", "runtime: out of memory"}},
		{"silent segfault", withLimit, Exit{Code: 139}, nil, []string{"POSSIBLY OUT OF MEMORY", "status 139 (as when killed by SIGSEGV)", "16MiB", "without reporting why"}},
		{"wrapper killed by SIGBUS", withLimit, Exit{Code: 128 + 7, Signal: syscall.SIGBUS}, nil, []string{"POSSIBLY", "was killed by SIGBUS"}},
		{"sigkill", noLimit, Exit{Code: 137}, []byte("working\n"), []string{"POSSIBLY OUT OF MEMORY", "SIGKILL the worker did not send", "out-of-memory killer"}},
		{"sigkill with limit", withLimit, Exit{Code: 137}, nil, []string{"POSSIBLY", "SIGKILL the worker did not send"}},
		// No evidence, no claim.
		{"success despite message", withLimit, Exit{Code: 0}, bashOOM, nil},
		{"plain failure", withLimit, Exit{Code: 1}, []byte("test failed: expected 3, got 4\n"), nil},
		{"message but no limit", noLimit, Exit{Code: 2}, bashOOM, nil},
		{"segfault but no limit", noLimit, Exit{Code: 139}, nil, nil},
		{"other signal", withLimit, Exit{Code: 143}, nil, nil},
		{"cgroup mode counts exactly", cgroup, Exit{Code: 137}, bashOOM, nil},
	}
	for _, tc := range tests {
		out := tc.a.Explain(tc.exit, tc.stderr)
		if tc.want == nil {
			if out != (Outcome{}) {
				t.Errorf("%s: %+v, want no report", tc.name, out)
			}
			continue
		}
		if !out.Suspected || out.OOMKilled {
			t.Errorf("%s: %+v, want Suspected only", tc.name, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.Message, w) {
				t.Errorf("%s: message %q lacks %q", tc.name, out.Message, w)
			}
		}
	}
}

func TestAllocationFailureQuotesTheLastMatchingLine(t *testing.T) {
	got := allocationFailure([]byte("a: Cannot allocate memory\nb\nc: out of memory\r\n\n  \n"))
	if got != "c: out of memory" {
		t.Errorf("got %q", got)
	}
	long := strings.Repeat("x", 5000) + " out of memory"
	if got := allocationFailure([]byte(long)); len(got) > 210 || !strings.HasPrefix(got, "xxx") {
		t.Errorf("long line quoted as %d bytes", len(got))
	}
	if got := allocationFailure([]byte("all good\n")); got != "" {
		t.Errorf("got %q", got)
	}
}

func FuzzAllocationFailure(f *testing.F) {
	f.Add([]byte("bash: xrealloc: cannot allocate 12000128 bytes\n"))
	f.Add([]byte("\n\n\nMemoryError"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		line := allocationFailure(b)
		if len(line) > 203 {
			t.Fatalf("quoted %d bytes", len(line))
		}
		if line != "" && !strings.Contains(string(b), strings.TrimSuffix(line, "...")) {
			t.Fatalf("quoted %q, which is not in the input", line)
		}
		a := &Action{s: &Sandbox{}, pol: Policy{MemoryLimit: 1 << 20}}
		if out := a.Explain(Exit{Code: 1}, b); (out.Message != "") != (line != "") {
			t.Fatalf("Explain %q disagrees with allocationFailure %q", out.Message, line)
		}
	})
}
