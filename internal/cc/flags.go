package cc

import "strings"

// kind says what the launcher does with a flag.
type kind int

const (
	// kindPlain flags are copied to the remote command unchanged.
	kindPlain kind = iota
	// kindPath flags take a file or directory that may need rewriting.
	kindPath
	// kindLocal flags make the whole invocation run locally: the launcher
	// cannot reproduce their effect remotely (other outputs, other modes,
	// files the dependency listing does not show).
	kindLocal
	kindCompile // -c
	kindOutput  // -o
	kindLang    // -x
	kindDepMD   // -MD, -MMD
	kindDepMF   // -MF
	kindDepMT   // -MT, -MQ
	kindDepMP   // -MP
	kindSysroot // --sysroot, -isysroot: the user chose the system root
	kindNoStd   // -nostdinc: no default system directories
	kindMap     // -ffile-prefix-map and friends (composed with ours)
	kindDebug   // -g...: debug information records directories
)

// arity says how a flag takes its value.
type arity int

const (
	noValue  arity = iota // -c
	joined                // -std=c11: the value is part of the argument only
	separate              // -I dir or -Idir
	sepOnly               // -Xclang arg: the next argument only
)

// flagSpec is one entry of the table of known flags.
type flagSpec struct {
	name  string
	arity arity
	kind  kind
}

// exactFlags are matched by the whole argument (noValue) or, for the
// separate-value flags, by the argument alone (value next) or as a
// prefix (value joined). Longer names are tried first by lookupFlag.
var exactFlags = []flagSpec{
	{"-c", noValue, kindCompile},
	{"-o", separate, kindOutput},
	{"-x", separate, kindLang},
	{"-I", separate, kindPath},
	{"-iquote", separate, kindPath},
	{"-isystem", separate, kindPath},
	{"-idirafter", separate, kindPath},
	{"-include", separate, kindPath},
	{"-imacros", separate, kindPath},
	{"-isysroot", separate, kindSysroot},
	{"--sysroot", separate, kindSysroot}, // --sysroot dir; --sysroot=dir below
	{"-D", separate, kindPlain},
	{"-U", separate, kindPlain},
	{"-MD", noValue, kindDepMD},
	{"-MMD", noValue, kindDepMD},
	{"-MF", separate, kindDepMF},
	{"-MT", separate, kindDepMT},
	{"-MQ", separate, kindDepMT},
	{"-MP", noValue, kindDepMP},
	{"-nostdinc", noValue, kindNoStd},
	{"-nostdinc++", noValue, kindPlain},
	{"-nostdlib", noValue, kindPlain},
	{"-nostartfiles", noValue, kindPlain},
	{"-target", sepOnly, kindPlain},
	{"-mllvm", sepOnly, kindPlain}, // before "-m" takes it as joined
	{"-Qunused-arguments", noValue, kindPlain},
	{"-nostdlibinc", noValue, kindNoStd},
	{"-resource-dir", sepOnly, kindLocal},
	{"-arch", sepOnly, kindPlain},
	{"--param", separate, kindPlain},
	{"-pipe", noValue, kindPlain},
	{"-w", noValue, kindPlain},
	{"-pedantic", noValue, kindPlain},
	{"-pedantic-errors", noValue, kindPlain},
	{"-ansi", noValue, kindPlain},
	{"-pthread", noValue, kindPlain},
	{"-undef", noValue, kindPlain},
	{"-trigraphs", noValue, kindPlain},
	{"-shared", noValue, kindPlain},
	{"-static", noValue, kindPlain},
	{"-pie", noValue, kindPlain},
	{"-no-pie", noValue, kindPlain},
	{"-rdynamic", noValue, kindPlain},
	{"-p", noValue, kindLocal},
	{"-pg", noValue, kindLocal},
	// Modes other than a plain compile, and flags with effects the
	// launcher cannot see or bring back.
	{"-E", noValue, kindLocal},
	{"-S", noValue, kindLocal},
	{"-M", noValue, kindLocal},
	{"-MM", noValue, kindLocal},
	{"-MG", noValue, kindLocal},
	{"-H", noValue, kindLocal},
	{"-v", noValue, kindLocal},
	{"-###", noValue, kindLocal},
	{"-save-temps", noValue, kindLocal},
	{"-time", noValue, kindLocal},
	{"-B", separate, kindLocal},
	{"-L", separate, kindLocal},
	{"-l", separate, kindLocal},
	{"-Xclang", sepOnly, kindLocal},
	{"-Xpreprocessor", sepOnly, kindLocal},
	{"-Xassembler", sepOnly, kindLocal},
	{"-Xlinker", sepOnly, kindLocal},
	{"-iprefix", separate, kindLocal},
	{"-iwithprefix", separate, kindLocal},
	{"-iwithprefixbefore", separate, kindLocal},
	{"-include-pch", separate, kindLocal},
	{"-wrapper", separate, kindLocal},
	{"--coverage", noValue, kindLocal},
}

// joinedFlags are matched by prefix and carry their value after the
// prefix ("-std=c11", "-O2", "-Wall").
var joinedFlags = []flagSpec{
	{"--sysroot=", joined, kindSysroot},
	{"-std=", joined, kindPlain},
	{"--std=", joined, kindPlain},
	{"-stdlib=", joined, kindPlain},
	{"--target=", joined, kindPlain},
	{"--param=", joined, kindPlain},
	{"-O", joined, kindPlain},
	{"-specs=", joined, kindLocal},
	{"--gcc-toolchain=", joined, kindLocal},
	{"-print-", joined, kindLocal},
	{"-dump", joined, kindLocal},
	{"-Wa,", joined, kindPlain}, // see assemblerFlag
	{"-Wp,", joined, kindLocal},
	{"-Wl,", joined, kindPlain}, // link flags are ignored by -c
	{"-W", joined, kindPlain},
	{"-m", joined, kindPlain},
	{"-f", joined, kindPlain},
	{"-g", joined, kindDebug},
}

// localFPrefixes are -f flags that write extra outputs, read files the
// dependency listing does not report, or depend on the local machine.
var localFPrefixes = []string{
	"-fprofile", "-fno-profile", "-fauto-profile", "-fbranch-probabilities", "-ftest-coverage",
	"-fcoverage", "-fplugin", "-fdump-", "-fstack-usage", "-fcallgraph-info",
	"-fsave-optimization-record", "-fopt-info", "-fsanitize-blacklist", "-fsanitize-ignorelist",
	"-fmodules", "-fmodule-", "-fimplicit-modules", "-fprebuilt-module", "-fcrash-diagnostics",
	"-fdebug-compilation-dir", "-fcoverage-compilation-dir", "-ffile-compilation-dir",
	"-frecord-command-line", "-fpch-", "-fcs-profile", "-fdiagnostics-format=sarif",
	"-fsyntax-only", "-flto-partition", "-fconstant-cfstrings",
}

// mapFPrefixes are the path-remapping flags the launcher composes with its
// own (see layout.go).
var mapFPrefixes = []string{"-ffile-prefix-map=", "-fdebug-prefix-map=", "-fmacro-prefix-map="}

// nativeValues make the code depend on the local CPU.
var nativeSuffixes = []string{"=native"}

// lookupFlag finds the table entry for arg. It returns the entry and the
// value joined to the argument (or "" when the value is the next
// argument or there is none). ok is false for unknown flags.
func lookupFlag(arg string) (spec flagSpec, value string, hasJoined bool, ok bool) {
	best := -1
	for i, f := range exactFlags {
		switch {
		case arg == f.name:
			if best < 0 || len(f.name) > len(exactFlags[best].name) {
				best = i
			}
		case f.arity == separate && strings.HasPrefix(arg, f.name) && !strings.HasPrefix(f.name, "--"):
			if best < 0 || len(f.name) > len(exactFlags[best].name) {
				best = i
			}
		}
	}
	if best >= 0 {
		f := exactFlags[best]
		if arg == f.name {
			return f, "", false, true
		}
		return f, arg[len(f.name):], true, true
	}
	for _, f := range joinedFlags {
		if strings.HasPrefix(arg, f.name) {
			spec := f
			switch f.name {
			case "-f":
				spec = fFlag(arg)
			case "-m":
				if hasAnySuffix(arg, nativeSuffixes) {
					spec.kind = kindLocal
				}
			case "-Wa,":
				spec.kind = assemblerFlag(arg)
			case "-g":
				if strings.HasPrefix(arg, "-gsplit-dwarf") {
					spec.kind = kindLocal
				}
			}
			return spec, arg[len(f.name):], true, true
		}
	}
	return flagSpec{}, "", false, false
}

// assemblerFlag classifies -Wa,OPTS: options that write a listing (-a...)
// or a dependency file (--MD), or search .include directories (-I), run
// locally; others (--noexecstack, -mrelax-relocations=no) are plain.
func assemblerFlag(arg string) kind {
	for _, o := range strings.Split(strings.TrimPrefix(arg, "-Wa,"), ",") {
		if strings.HasPrefix(o, "-a") || strings.HasPrefix(o, "--MD") || strings.HasPrefix(o, "-I") || strings.HasPrefix(o, "@") {
			return kindLocal
		}
	}
	return kindPlain
}

// fFlag classifies one -f flag.
func fFlag(arg string) flagSpec {
	for _, p := range mapFPrefixes {
		if strings.HasPrefix(arg, p) {
			return flagSpec{"-f", joined, kindMap}
		}
	}
	for _, p := range localFPrefixes {
		if strings.HasPrefix(arg, p) {
			return flagSpec{"-f", joined, kindLocal}
		}
	}
	return flagSpec{"-f", joined, kindPlain}
}

func hasAnySuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}
