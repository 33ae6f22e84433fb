package cc

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseRemote checks the plain compiles Parse accepts and what it
// reads from them.
func TestParseRemote(t *testing.T) {
	cases := []struct {
		args                []string
		source, output, dep string
	}{
		{[]string{"-c", "a.c"}, "a.c", "a.o", ""},
		{[]string{"-c", "dir/a.cpp", "-o", "x/y.o", "-O2", "-Wall", "-DX=1", "-D", "Y", "-std=c++17"}, "dir/a.cpp", "x/y.o", ""},
		{[]string{"-oout.o", "-c", "-xc", "weird.txt"}, "weird.txt", "out.o", ""},
		{[]string{"-c", "-x", "c++", "a.c", "-x", "none"}, "a.c", "a.o", ""},
		{[]string{"-c", "s.S", "-MD"}, "s.S", "s.o", "s.d"},
		{[]string{"-c", "a.c", "-o", "o/a.o", "-MMD", "-MP"}, "a.c", "o/a.o", "o/a.d"},
		{[]string{"-c", "a.c", "-MD", "-MF", "deps/x.d", "-MT", "t"}, "a.c", "a.o", "deps/x.d"},
		{[]string{"-c", "a.c", "-g", "-fPIC", "-march=x86-64-v2", "-Wl,-z,now", "-isystem", "/opt/inc", "-include", "pre.h", "--sysroot=/sr"}, "a.c", "a.o", ""},
		{[]string{"-c", "a.c", "-Wa,--noexecstack"}, "a.c", "a.o", ""},
		{[]string{"-c", "a.c", "-target", "x86_64-linux-gnu", "--target=aarch64", "-stdlib=libc++", "-mllvm", "-inline-threshold=100", "-Qunused-arguments", "-nostdlibinc"}, "a.c", "a.o", ""},
	}
	for _, tc := range cases {
		c, err := Parse("gcc", tc.args, "/w")
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.args, err)
			continue
		}
		dep, _ := c.depFile, 0
		if c.depMode == "" {
			dep = ""
		}
		if c.Source != tc.source || c.Output != tc.output || dep != tc.dep {
			t.Errorf("Parse(%q) = source %q output %q dep %q, want %q %q %q", tc.args, c.Source, c.Output, dep, tc.source, tc.output, tc.dep)
		}
		if !reflect.DeepEqual(c.Command(), append([]string{"gcc"}, tc.args...)) {
			t.Errorf("Command() = %q", c.Command())
		}
	}
}

// TestParseLocal checks that everything but a plain compile runs locally,
// with a reason.
func TestParseLocal(t *testing.T) {
	cases := []struct {
		args   []string
		reason string
	}{
		{[]string{"a.o", "b.o", "-o", "prog"}, "not a source"},
		{[]string{"a.c", "-o", "prog"}, "-c is missing"},
		{[]string{"-E", "a.c"}, "flag -E"},
		{[]string{"-S", "-c", "a.c"}, "flag -S"},
		{[]string{"-M", "a.c"}, "flag -M"},
		{[]string{"-MM", "-c", "a.c"}, "flag -MM"},
		{[]string{"-c", "-"}, "stdin"},
		{[]string{"-c", "-x", "c", "-"}, "stdin"},
		{[]string{"-c", "a.c", "b.c"}, "2 source files"},
		{[]string{"-c"}, "no source"},
		{[]string{"-c", "a.c", "--frobnicate"}, "unknown flag --frobnicate"},
		{[]string{"-c", "@args.rsp"}, "response file"},
		{[]string{"-c", "a.s"}, "not a source"},
		{[]string{"-c", "-x", "assembler", "a.x"}, "language assembler"},
		{[]string{"-c", "a.h"}, "not a source"},
		{[]string{"-c", "a.c", "-march=native"}, "flag -march=native"},
		{[]string{"-c", "a.c", "-fprofile-generate"}, "flag -fprofile-generate"},
		{[]string{"-c", "a.c", "-gsplit-dwarf"}, "flag -gsplit-dwarf"},
		{[]string{"-c", "a.c", "-o"}, "has no value"},
		{[]string{"-c", "a.c", "-o", "a.o", "-o", "b.o"}, "2 -o flags"},
		{[]string{"-c", "a.c", "-o", "-"}, "stdout"},
		{[]string{"-c", "a.c", "-MD", "-MF", "-"}, "stdout"},
		{[]string{"-c", "a.c", "-MF", "x.d"}, "without -MD"},
		{[]string{"-c", "a.c", "-Wp,-MD,x.d"}, "flag -Wp"},
		{[]string{"-c", "a.c", "-Wa,--noexecstack,-adhln=a.lst"}, "flag -Wa,--noexecstack,-adhln"},
		{[]string{"-c", "a.c", "-Xclang", "-foo"}, "flag -Xclang"},
		{[]string{"-c", "a.c", "-save-temps"}, "flag -save-temps"},
		{[]string{"-c", "a.c", "-B/opt/bin"}, "flag -B"},
	}
	for _, tc := range cases {
		_, err := Parse("gcc", tc.args, "/w")
		reason, ok := IsLocal(err)
		if !ok || !strings.Contains(reason, tc.reason) {
			t.Errorf("Parse(%q) = %v, want local: ...%s...", tc.args, err, tc.reason)
		}
	}
	if _, err := Parse("./mycc", []string{"-c", "a.c"}, "/w"); err == nil {
		t.Error("a relative compiler path should run locally")
	}
	if _, err := Parse("gcc", []string{"-c", "a.c"}, "rel"); err == nil {
		t.Error("a relative working directory is an error")
	} else if _, ok := IsLocal(err); ok {
		t.Error("a relative working directory is an error, not a local run")
	}
}

// FuzzParse: Parse never panics, and a compile it accepts is
// self-consistent: its source and output are among (or derived from) the
// arguments, parsing it again gives the same result, and the listing
// arguments drop -c and -o.
func FuzzParse(f *testing.F) {
	f.Add("-c\x00a.c\x00-o\x00a.o")
	f.Add("-c\x00-x\x00c\x00-\x00-MD\x00-MF\x00x.d")
	f.Add("-I\x00inc\x00-c\x00src/a.cpp\x00-MMD\x00-MP\x00-MT\x00t")
	f.Add("-c\x00a.c\x00-ffile-prefix-map=/a=b\x00-g\x00--sysroot=/s")
	f.Add("-c\x00a.S\x00-include\x00x.h\x00-Ifoo\x00-isystem\x00/usr/x")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		c, err := Parse("gcc", args, "/w")
		if err != nil {
			if _, ok := IsLocal(err); !ok {
				t.Fatalf("Parse(%q): error %v is not a local reason", args, err)
			}
			return
		}
		if c.Source == "" || c.Output == "" {
			t.Fatalf("Parse(%q): source %q output %q", args, c.Source, c.Output)
		}
		found := false
		for _, a := range args {
			found = found || a == c.Source
		}
		if !found {
			t.Fatalf("Parse(%q): source %q is not an argument", args, c.Source)
		}
		if c.depMode != "" && c.depFile == "" {
			t.Fatalf("Parse(%q): -MD without a dependency file name", args)
		}
		again, err := Parse("gcc", c.Args, "/w")
		if err != nil || again.Source != c.Source || again.Output != c.Output || again.depFile != c.depFile {
			t.Fatalf("Parse(%q) again: %+v %v", args, again, err)
		}
		// Walk the listing as gcc reads it: the value of a separate-value
		// flag ("-I -c" names a directory "-c") is not a flag.
		listing := c.listingArgs("-M", true)
		for i := 0; i < len(listing); i++ {
			a := listing[i]
			if a == "-c" || a == "-MD" || a == "-MMD" {
				t.Fatalf("listing args %q keep %s at %d", listing, a, i)
			}
			if spec, _, hasJoined, ok := lookupFlag(a); ok && !hasJoined && (spec.arity == separate || spec.arity == sepOnly) {
				i++
			}
		}
	})
}

// readFlag takes a flag's value joined or from the next argument and
// says where the flag ended; a missing value or an unknown flag runs
// locally.
func TestReadFlag(t *testing.T) {
	for _, tc := range []struct {
		args              []string
		value, joined, lo string // lo: the local reason, if any
		next              int
	}{
		{args: []string{"-o", "a.o"}, value: "a.o", next: 1},
		{args: []string{"-Iinc"}, value: "inc", joined: "-I", next: 0},
		{args: []string{"-I", "inc"}, value: "inc", next: 1},
		{args: []string{"-target", "x86_64"}, value: "x86_64", next: 1},
		{args: []string{"-o"}, lo: "flag -o has no value"},
		{args: []string{"-target"}, lo: "flag -target has no value"},
		{args: []string{"--no-such-flag"}, lo: "unknown flag --no-such-flag"},
	} {
		it, next, err := readFlag(tc.args, 0)
		if tc.lo != "" {
			if reason, ok := IsLocal(err); !ok || !strings.Contains(reason, tc.lo) {
				t.Errorf("%q: %v, want local %q", tc.args, err, tc.lo)
			}
			continue
		}
		if err != nil || it.value != tc.value || it.joinedPrefix != tc.joined || next != tc.next {
			t.Errorf("%q: value %q joined %q next %d err %v; want %q %q %d", tc.args, it.value, it.joinedPrefix, next, err, tc.value, tc.joined, tc.next)
		}
	}
}
