package cc

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestScanDirectives checks what the directive parser follows and what it
// must not be fooled by.
func TestScanDirectives(t *testing.T) {
	q := func(name string) directive { return directive{name: name} }
	a := func(name string) directive { return directive{name: name, angle: true} }
	cases := []struct {
		name string
		src  string
		want []directive
	}{
		{"plain", "#include <stdio.h>\n#include \"a.h\"\nint x;\n", []directive{a("stdio.h"), q("a.h")}},
		{"spaces and import", "  #  include<x.h>\n\t# import \"y.h\" // why\n", []directive{a("x.h"), q("y.h")}},
		{"include_next", "#include_next <limits.h>\n", []directive{{name: "limits.h", angle: true, next: true}}},
		{"digraph", "%:include \"d.h\"\n", []directive{q("d.h")}},
		{"every branch", "#if 0\n#include \"dead.h\"\n#elif defined(X)\n#include <other.h>\n#else\n#include \"live.h\"\n#endif\n",
			[]directive{q("dead.h"), a("other.h"), q("live.h")}},
		{"block comment", "/*\n#include \"no1.h\"\n*/\n#include \"yes.h\"\n", []directive{q("yes.h")}},
		{"line comment", "// #include \"no.h\"\nint x; // \\\n#include \"no2.h\"\n#include \"yes.h\"\n", []directive{q("yes.h")}},
		{"string", "const char *s = \"\\\"\\\n#include \\\"no.h\\\"\";\nchar c = '\"';\n#include \"yes.h\"\n", []directive{q("yes.h")}},
		{"string with comment opener", "const char *s = \"/*\";\n#include \"yes.h\"\n/* \" */\n#include \"yes2.h\"\n", []directive{q("yes.h"), q("yes2.h")}},
		{"not first on the line", "int x; #include \"no.h\"\n", nil},
		{"comment before directive", "/* c */ #include \"yes.h\"\n# /* c */ include /* c */ <z.h>\n", []directive{q("yes.h"), a("z.h")}},
		{"continuation", "#inc\\\nlude \"sp\\\nlice.h\"\n#define X \\\n#include \"no.h\"\n", []directive{q("splice.h")}},
		{"crlf", "#include \"a.h\"\r\n#include \"b.h\"\r\n", []directive{q("a.h"), q("b.h")}},
		{"lone cr", "#include \"a.h\"\r#include \"b.h\"\r", []directive{q("a.h"), q("b.h")}},
		{"raw string", "const char *r = R\"x(\n#include \"no.h\"\n)\" )x\";\n#include \"yes.h\"\n", []directive{q("yes.h")}},
		{"not a raw string", "const char *r = FOOR\"(\";\n#include \"yes.h\"\n", []directive{q("yes.h")}},
		{"pp-number is not a raw prefix", "int x = 1uR\"(\";\n#include \"yes.h\"\n", []directive{q("yes.h")}},
		{"has_include", "#if __has_include(<opt.h>) && __has_include_next(\"n.h\")\n#endif\n#ifdef __has_include\n#endif\n#if defined __has_include\n#endif\n",
			[]directive{a("opt.h"), {name: "n.h", next: true}}},
		{"has_include in a macro", "#define HAS_TBB __has_include(<tbb/tbb.h>)\n#if HAS_TBB\n#endif\n", []directive{a("tbb/tbb.h")}},
		{"pragma GCC dependency", "#pragma GCC dependency \"parse.y\" extra\n#pragma GCC poison x\n#pragma once\n", []directive{{name: "parse.y", only: true}}},
		{"apostrophe in error", "#error don't\n#include \"yes.h\"\n", []directive{q("yes.h")}},
		{"angle name with slashes", "#include <sys//x.h>\n", []directive{a("sys//x.h")}},
		{"other directives", "#define A <b.h>\n#pragma once\n#line 3 \"x.h\"\n#ifdef __has_include\n#endif\n", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := scanDirectives([]byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestScanDirectivesCannotScan: what the parser cannot be sure of is
// left to the compiler's listing.
func TestScanDirectivesCannotScan(t *testing.T) {
	for _, src := range []string{
		"#include HEADER\n",
		"#include_next MACRO(x)\n",
		"#if __has_include(HDR)\n#endif\n",
		"#embed \"data.bin\"\n",
		"#if __has_embed(\"x\")\n#endif\n",
		"#include <unterminated\n",
		"#include \"unterminated\n",
		"#include\n",
		"const char *r = R\"(never closed\n",
		"??=include \"tri.h\"\n",
	} {
		_, err := scanDirectives([]byte(src))
		var cs *cannotScan
		if !errors.As(err, &cs) {
			t.Errorf("%q: err %v, want cannotScan", src, err)
		}
	}
	// A computed include inside a comment or a string is not one.
	if _, err := scanDirectives([]byte("/* #include X */\nconst char *s = \"#include X\";\n")); err != nil {
		t.Errorf("commented computed include: %v", err)
	}
}

// FuzzScanDirectives: the parser never panics, terminates, and names
// only headers that are in the input.
func FuzzScanDirectives(f *testing.F) {
	for _, s := range []string{
		"#include <a.h>\n", "#include \"b.h\"\r\n", "/* #include \"x\" */", "R\"d(\n)d\"", "#if __has_include(<x>)\n",
		"\"\\\n#include\"", "%:include <y>", "#include_next <z>\\\n", "'#include'", "#inc\\ \nlude <q>", "1'2'3 /*\n*/ #include <w>",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dirs, err := scanDirectives(data)
		var cs *cannotScan
		if err != nil && !errors.As(err, &cs) {
			t.Fatalf("error of another type: %v", err)
		}
		joined := string(removeSplices(data))
		for _, d := range dirs {
			if d.name == "" || !strings.Contains(joined, d.name) {
				t.Fatalf("directive %+v is not in the input", d)
			}
		}
	})
}
