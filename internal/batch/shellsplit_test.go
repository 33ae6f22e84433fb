package batch

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

var splitCases = []struct {
	in   string
	want []string
}{
	{"", nil},
	{"  gcc  -c a.c ", []string{"gcc", "-c", "a.c"}},
	{`gcc -DX="a b" -DY='c "d"' e\ f`, []string{"gcc", "-DX=a b", `-DY=c "d"`, "e f"}},
	{`cc -DS=\"str\" "x\"y\\z\$w\q"`, []string{"cc", `-DS="str"`, `x"y\z$w\q`}},
	{"a\\\nb 'c\\d' \"\"", []string{"ab", `c\d`, ""}},
	{"a''b \"\"c", []string{"ab", "c"}},
	{"x\t$HOME *.c;", []string{"x", "$HOME", "*.c;"}},
	{"\"l1\\\nl2\"", []string{"l1l2"}},
}

func TestSplitCommand(t *testing.T) {
	for _, tc := range splitCases {
		got, err := SplitCommand(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for in, want := range map[string]string{
		`gcc 'a`:   "single quote is not closed (at byte 5)",
		`gcc "a\"`: "double quote is not closed (at byte 5)",
		`gcc a\`:   "backslash ends the command",
	} {
		if _, err := SplitCommand(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SplitCommand(%q): error %v, want %q", in, err, want)
		}
	}
}

// TestSplitCommandAsShell checks the cases against /bin/sh itself.
func TestSplitCommandAsShell(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	for _, tc := range splitCases {
		if strings.ContainsAny(tc.in, "$*;") || tc.in == "" {
			continue // the shell would expand or run these
		}
		cmd := exec.Command("sh", "-c", `eval "set -- $1"; for a in "$@"; do printf '[%s]' "$a"; done`, "sh", tc.in)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		var want strings.Builder
		for _, w := range tc.want {
			want.WriteString("[" + w + "]")
		}
		if string(out) != want.String() {
			t.Errorf("sh splits %q as %s, the case says %s", tc.in, out, want.String())
		}
	}
}
