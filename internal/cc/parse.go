package cc

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// LocalError says that an invocation is not a plain compile the launcher
// can run remotely, and why. The caller runs the compiler locally with the
// original arguments; it is not a failure.
type LocalError struct {
	Reason string
}

func (e *LocalError) Error() string { return "runs locally: " + e.Reason }

// IsLocal reports whether err says "run this locally" and returns the reason.
func IsLocal(err error) (string, bool) {
	var l *LocalError
	if errors.As(err, &l) {
		return l.Reason, true
	}
	return "", false
}

func local(format string, a ...any) error {
	return &LocalError{Reason: fmt.Sprintf(format, a...)}
}

// argItem is one parsed argument (or flag with its separate value).
type argItem struct {
	raw   []string // the argument(s) as given: ["-I", "dir"] or ["-Idir"]
	spec  flagSpec
	value string // the flag's value ("" for none); the file for a source
	// joinedPrefix is the flag text before a joined value ("-I" of
	// "-Idir", "--sysroot=" of "--sysroot=dir"); "" when the value is the
	// next argument.
	joinedPrefix string
	source       bool
}

// Compile is one compiler invocation the launcher can run remotely: a
// plain compile of one source to one object file.
type Compile struct {
	// Compiler is the compiler as given (a name looked up on PATH, or a path).
	Compiler string
	// Args are the arguments as given, without the compiler.
	Args []string
	// Cwd is the absolute directory the compiler runs in.
	Cwd string
	// Source is the source file as given; Output is the object file as
	// given with -o, or the compiler's default name.
	Source, Output string
	// Lang is the -x language that applies to Source ("" when none).
	Lang string

	items []argItem

	explicitOutput bool // -o given

	depMode    string   // "", "-MD" or "-MMD"
	depFile    string   // the dependency file to write, as the compiler names it
	depTargets []string // -MT/-MQ flags as given, flag and value: ["-MT", "x", ...]
	depPhony   bool     // -MP

	userSysroot bool // --sysroot/-isysroot given
	noStdInc    bool
	debug       bool
	userMaps    []prefixMap

	// Filled by Spec.
	layout  *layout
	deps    *depsResult
	scanned bool // deps came from the include scanner
}

// sourceExts are the source suffixes that run remotely without -x, by the
// language gcc gives them. Assembler without preprocessing (.s) stays
// local: its .include directives do not show in the dependency listing.
var sourceExts = map[string]string{
	".c": "c", ".i": "cpp-output",
	".cc": "c++", ".cp": "c++", ".cxx": "c++", ".cpp": "c++", ".CPP": "c++", ".c++": "c++", ".C": "c++",
	".ii": "c++-cpp-output",
	".m":  "objective-c", ".mm": "objective-c++", ".M": "objective-c++",
	".S": "assembler-with-cpp", ".sx": "assembler-with-cpp",
}

// remoteLangs are the -x languages that run remotely.
var remoteLangs = map[string]bool{
	"c": true, "c++": true, "cpp-output": true, "c++-cpp-output": true,
	"objective-c": true, "objective-c++": true, "assembler-with-cpp": true,
}

// Parse reads a compiler command line. It returns a *LocalError (see
// IsLocal) for every invocation that must run locally and unchanged:
// linking, -E, -S, -M/-MM, reading stdin, several or no sources, response
// files, and any flag that is not in the launcher's table of known flags.
// cwd must be absolute.
func Parse(compiler string, args []string, cwd string) (*Compile, error) {
	if !filepath.IsAbs(cwd) {
		return nil, fmt.Errorf("cc: working directory %q is not absolute", cwd)
	}
	if compiler == "" {
		return nil, errors.New("cc: no compiler given; use `gantry cc COMPILER ARGS...`, for example `gantry cc gcc -c a.c`")
	}
	if strings.ContainsRune(compiler, '/') && !filepath.IsAbs(compiler) {
		return nil, local("compiler %q is a relative path", compiler)
	}
	p := &argParser{c: &Compile{Compiler: compiler, Args: append([]string(nil), args...), Cwd: filepath.Clean(cwd)}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "":
			return nil, local("an empty argument")
		case a == "-":
			return nil, local("the source is read from stdin")
		case a[0] == '@':
			return nil, local("response file %s", a)
		case a[0] != '-':
			if err := p.source(a); err != nil {
				return nil, err
			}
			continue
		}
		it, next, err := readFlag(args, i)
		if err != nil {
			return nil, err
		}
		i = next
		if err := p.flag(it); err != nil {
			return nil, err
		}
	}
	return p.finish()
}

// argParser is Parse's state while it reads a command line: the compile
// it fills and what it counts to check at the end.
type argParser struct {
	c       *Compile
	compile bool   // -c given
	outputs int    // -o flags
	lang    string // the -x language in force ("": by suffix)
	sources int
}

// source takes a source file: remote only in a language the workers
// compile, named by -x or by its suffix.
func (p *argParser) source(a string) error {
	l := p.lang
	if l == "" {
		var known bool
		if l, known = sourceExts[path.Ext(a)]; !known {
			return local("input %s is not a source the launcher compiles remotely", a)
		}
	}
	if !remoteLangs[l] {
		return local("language %s of %s", l, a)
	}
	p.sources++
	p.c.Source, p.c.Lang = a, p.lang
	p.c.items = append(p.c.items, argItem{raw: []string{a}, value: a, source: true})
	return nil
}

// readFlag reads the flag args[i] with its value, joined or in the next
// argument, and returns the index of its last argument. A flag not in
// the launcher's table, or without its value, runs locally.
func readFlag(args []string, i int) (argItem, int, error) {
	a := args[i]
	spec, value, hasJoined, ok := lookupFlag(a)
	if !ok {
		return argItem{}, i, local("unknown flag %s", a)
	}
	it := argItem{raw: []string{a}, spec: spec, value: value}
	switch {
	case spec.arity == separate && !hasJoined, spec.arity == sepOnly:
		if i+1 >= len(args) {
			return argItem{}, i, local("flag %s has no value", a)
		}
		i++
		it.raw = append(it.raw, args[i])
		it.value = args[i]
	case hasJoined:
		it.joinedPrefix = a[:len(a)-len(value)]
		if spec.arity == separate && value == "" {
			return argItem{}, i, local("flag %s has no value", a)
		}
	}
	return it, i, nil
}

// flag records what the flag means for the compile, and keeps it.
func (p *argParser) flag(it argItem) error {
	c, a := p.c, it.raw[0]
	switch it.spec.kind {
	case kindLocal:
		return local("flag %s", a)
	case kindCompile:
		p.compile = true
	case kindOutput:
		p.outputs++
		c.Output = it.value
	case kindLang:
		p.lang = it.value
		if p.lang == "none" {
			p.lang = ""
		}
	case kindDepMD:
		// -MMD after -MD (or the reverse): the last one wins, as in gcc.
		c.depMode = a
	case kindDepMF:
		c.depFile = it.value
	case kindDepMT:
		c.depTargets = append(c.depTargets, a[:3], it.value)
	case kindDepMP:
		c.depPhony = true
	case kindSysroot:
		c.userSysroot = true
	case kindNoStd:
		c.noStdInc = true
	case kindDebug:
		c.debug = a != "-g0"
	case kindMap:
		m, err := parsePrefixMap(a)
		if err != nil {
			return local("%v", err)
		}
		c.userMaps = append(c.userMaps, m)
	}
	c.items = append(c.items, it)
	return nil
}

// finish checks the command line as a whole (one compile of one source
// to one object) and fills in the outputs the compiler would choose.
func (p *argParser) finish() (*Compile, error) {
	c := p.c
	switch {
	case !p.compile:
		return nil, local("not a compile (-c is missing): linking or another mode")
	case p.sources == 0:
		return nil, local("no source file")
	case p.sources > 1:
		return nil, local("%d source files", p.sources)
	case p.outputs > 1:
		return nil, local("%d -o flags", p.outputs)
	}
	c.explicitOutput = p.outputs > 0
	if c.Output == "" {
		c.Output = trimExt(path.Base(c.Source)) + ".o"
	}
	if c.Output == "-" || c.depFile == "-" {
		return nil, local("an output is written to stdout")
	}
	if c.depMode == "" && (c.depFile != "" || len(c.depTargets) > 0 || c.depPhony) {
		// -MF, -MT, -MP without -MD/-MMD do nothing in gcc but are errors
		// in some compilers; the local compiler decides.
		return nil, local("-MF/-MT/-MQ/-MP without -MD or -MMD")
	}
	if c.depMode != "" && c.depFile == "" {
		c.depFile = defaultDepFile(c.Output, p.outputs > 0, c.Source)
	}
	return c, nil
}

// trimExt removes the suffix from a file name, as gcc's %b does.
func trimExt(name string) string {
	if ext := path.Ext(name); ext != "" && ext != name {
		return name[:len(name)-len(ext)]
	}
	return name
}

// defaultDepFile is the file -MD writes without -MF: the output with its
// suffix replaced by .d when -o was given, else the source's base name
// with .d (gcc's "%{!o:%b.d}%{o*:%.d%*}").
func defaultDepFile(output string, explicitOutput bool, source string) string {
	if explicitOutput {
		dir, base := path.Split(output)
		return dir + trimExt(base) + ".d"
	}
	return trimExt(path.Base(source)) + ".d"
}

// Command is the local command line: the compiler and the arguments as
// given, for running the compile locally.
func (c *Compile) Command() []string {
	return append([]string{c.Compiler}, c.Args...)
}
