package scheduler

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOnlyTheAssemblyHoldsTheScheduler keeps the ports the only way in:
// outside internal/server (which builds and runs the scheduler) no
// package's code names the type scheduler.Scheduler. Tests may: they
// build a real scheduler and hand services its ports.
func TestOnlyTheAssemblyHoldsTheScheduler(t *testing.T) {
	const pkg = "github.com/gantry-build/gantry/internal/scheduler"
	root := filepath.Join("..", "..")
	allowed := map[string]bool{filepath.Join(root, "internal", "server"): true}
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || allowed[filepath.Dir(path)] {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		name := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == pkg {
				name = "scheduler"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" {
			return nil
		}
		checked++
		if f, err = parser.ParseFile(fset, path, nil, 0); err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Scheduler" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == name {
					t.Errorf("%s names %s.Scheduler: take the port it uses (internal/scheduler/ports.go) instead", fset.Position(sel.Pos()), name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no file outside internal/server imports the scheduler: the walk looked in the wrong place")
	}
}
