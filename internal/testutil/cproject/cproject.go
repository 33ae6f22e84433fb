// Package cproject generates a C project for the tests and benchmarks of the
// client commands (`gantry cc`, `gantry batch`): nested source and header
// directories, a Makefile, a CMakeLists.txt and a compile_commands.json, all
// describing the same build. Every source includes system headers, a common
// header and headers of its module, and records __FILE__, so an object built
// remotely is byte-identical to the local one only if the paths the compiler
// saw were mapped back faithfully.
package cproject

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Options sizes the project.
type Options struct {
	// Modules is the number of directories under src/ (and include/).
	Modules int
	// FilesPerModule is the number of .c files in each module.
	FilesPerModule int
	// HeadersPerModule is the number of .h files in each module.
	HeadersPerModule int
	// Work scales the code in each source (loops the compiler must
	// optimise), so a compile costs about what a small real one does.
	Work int
}

// DefaultOptions is a few hundred sources and headers: 12 modules of 25
// sources and 6 headers each.
var DefaultOptions = Options{Modules: 12, FilesPerModule: 25, HeadersPerModule: 6, Work: 6}

// Project is a generated project.
type Project struct {
	// Dir is the project's directory (absolute).
	Dir string
	// Sources are the .c files relative to Dir, main.c last.
	Sources []string
}

// Objects returns the object files the Makefile and compile_commands.json
// build, relative to Dir: build/<source without .c>.o.
func (p *Project) Objects() []string {
	objs := make([]string, len(p.Sources))
	for i, s := range p.Sources {
		objs[i] = ObjectOf(s)
	}
	return objs
}

// ObjectOf is the object the Makefile builds from a source.
func ObjectOf(source string) string {
	return filepath.Join("build", strings.TrimSuffix(source, ".c")+".o")
}

// CFlags are the compiler flags of every compile (besides -I, -c and -o).
var CFlags = []string{"-O2", "-Wall"}

// Generate writes a project into dir (created if missing).
func Generate(dir string, o Options) (*Project, error) {
	if o.Modules < 1 || o.FilesPerModule < 1 || o.HeadersPerModule < 1 {
		return nil, fmt.Errorf("cproject: every count must be at least 1: %+v", o)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	p := &Project{Dir: abs}
	files := map[string]string{}
	files["include/common/util.h"] = utilHeader
	var calls, decls strings.Builder
	for m := 0; m < o.Modules; m++ {
		for h := 0; h < o.HeadersPerModule; h++ {
			files[fmt.Sprintf("include/mod%d/h%d.h", m, h)] = moduleHeader(m, h)
		}
		for f := 0; f < o.FilesPerModule; f++ {
			src := fmt.Sprintf("src/mod%d/sub%d/f%d.c", m, f%3, f)
			files[src] = source(m, f, o)
			p.Sources = append(p.Sources, src)
			fmt.Fprintf(&decls, "int mod%d_f%d(int);\nconst char *mod%d_f%d_file(void);\n", m, f, m, f)
			fmt.Fprintf(&calls, "\tsum += mod%d_f%d(argc); files += strlen(mod%d_f%d_file());\n", m, f, m, f)
		}
	}
	files["src/main.c"] = fmt.Sprintf(mainSource, decls.String(), calls.String())
	p.Sources = append(p.Sources, "src/main.c")
	files["Makefile"] = makefile(p.Sources)
	files["CMakeLists.txt"] = cmakeLists(p.Sources)
	for name, body := range files {
		path := filepath.Join(abs, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	if err := p.WriteCompileCommands("gcc", filepath.Join(abs, "compile_commands.json")); err != nil {
		return nil, err
	}
	return p, nil
}

// CompileArgs is the compile command of one source, as the Makefile runs
// it from Dir (compiler first).
func CompileArgs(compiler, source string) []string {
	args := []string{compiler, "-Iinclude"}
	args = append(args, CFlags...)
	return append(args, "-c", source, "-o", ObjectOf(source))
}

// WriteCompileCommands writes a compile_commands.json for the project's
// compiles with compiler, in the form CMake writes: absolute directory and
// file, arguments as a list.
func (p *Project) WriteCompileCommands(compiler, path string) error {
	type entry struct {
		Directory string   `json:"directory"`
		File      string   `json:"file"`
		Arguments []string `json:"arguments"`
		Output    string   `json:"output"`
	}
	entries := make([]entry, len(p.Sources))
	for i, s := range p.Sources {
		entries[i] = entry{Directory: p.Dir, File: filepath.Join(p.Dir, s), Arguments: CompileArgs(compiler, s), Output: ObjectOf(s)}
	}
	b, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

const utilHeader = `#ifndef COMMON_UTIL_H
#define COMMON_UTIL_H
#include <stddef.h>
#include <string.h>
#define UTIL_MIX(a, b) (((a) * 31u) ^ ((b) + 0x9e3779b9u))
static inline unsigned util_hash(const char *s) {
	unsigned h = 2166136261u;
	for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}
#endif
`

func moduleHeader(m, h int) string {
	return fmt.Sprintf(`#ifndef MOD%[1]d_H%[2]d_H
#define MOD%[1]d_H%[2]d_H
#include "common/util.h"
struct mod%[1]d_h%[2]d { int a, b; unsigned c[%[3]d]; };
static inline int mod%[1]d_h%[2]d_step(int x) { return (int)UTIL_MIX((unsigned)x, %[2]du) %% 1009; }
#endif
`, m, h, 4+h)
}

func source(m, f int, o Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#include <stdio.h>\n#include <stdlib.h>\n#include \"common/util.h\"\n")
	h1, h2 := f%o.HeadersPerModule, (f+1)%o.HeadersPerModule
	fmt.Fprintf(&b, "#include \"mod%d/h%d.h\"\n#include \"mod%d/h%d.h\"\n\n", m, h1, m, h2)
	fmt.Fprintf(&b, "const char *mod%d_f%d_file(void) { return __FILE__; }\n\n", m, f)
	for w := 0; w < o.Work; w++ {
		fmt.Fprintf(&b, `static int work%[1]d(int x) {
	struct mod%[2]d_h%[3]d s = { x, %[1]d, { 0 } };
	for (int i = 0; i < %[4]d; i++) {
		s.a = mod%[2]d_h%[3]d_step(s.a + i) + (int)(s.c[i %% 4] ^ (unsigned)s.b);
		s.c[i %% 4] += (unsigned)s.a * %[5]du;
		if (s.a %% 7 == %[1]d %% 7) s.b = abs(s.b - s.a);
	}
	return s.a ^ s.b;
}

`, w, m, h1, 16+w*3, 2*w+1)
	}
	fmt.Fprintf(&b, "int mod%d_f%d(int x) {\n\tint r = x;\n", m, f)
	for w := 0; w < o.Work; w++ {
		fmt.Fprintf(&b, "\tr = work%d(r) + mod%d_h%d_step(r);\n", w, m, h2)
	}
	fmt.Fprintf(&b, "\tif (r == 42) printf(\"%%s\\n\", mod%d_f%d_file());\n\treturn r;\n}\n", m, f)
	return b.String()
}

const mainSource = `#include <stdio.h>
#include <string.h>
%s
int main(int argc, char **argv) {
	(void)argv;
	long sum = 0;
	size_t files = 0;
%s	printf("%%ld %%zu\n", sum, files);
	return 0;
}
`

func makefile(sources []string) string {
	return fmt.Sprintf(`# Generated by internal/testutil/cproject.
CC ?= gcc
CFLAGS ?= %s
CPPFLAGS = -Iinclude
SRCS = %s
OBJS = $(SRCS:%%.c=build/%%.o)

app: $(OBJS)
	$(CC) -o $@ $(OBJS)

build/%%.o: %%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

clean:
	rm -rf build app

-include $(OBJS:.o=.d)
.PHONY: clean
`, strings.Join(CFlags, " "), strings.Join(sources, " \\\n\t"))
}

func cmakeLists(sources []string) string {
	return fmt.Sprintf(`# Generated by internal/testutil/cproject.
cmake_minimum_required(VERSION 3.13)
project(cproject C)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
set(CMAKE_C_FLAGS "%s")
include_directories(include)
add_executable(app
	%s)
`, strings.Join(CFlags, " "), strings.Join(sources, "\n\t"))
}
