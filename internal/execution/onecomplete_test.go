package execution

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneCompletePath keeps a lease's result on one path: no code names
// the ways it used to take besides it (a single-lease Complete beside
// CompleteMany, a LeaseTask look-up before caching, a SameProcess
// context key), and the worker service calls the scheduler's Complete
// in one place, WorkerService.complete, which Complete and Poll share.
func TestOneCompletePath(t *testing.T) {
	gone := map[string]string{
		"CompleteMany":    "scheduler.Leases.Complete takes a batch",
		"LeaseTask":       "the scheduler writes the ActionCache itself (scheduler.ActionCacheWriter)",
		"SameProcess":     "no poll waits for its leases to be stored (scheduler reconcile.go)",
		"newLocalWorkers": "execution.InProcess",
	}
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	var calls []string
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
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		inExecution := filepath.Dir(path) == filepath.Join(root, "internal", "execution")
		for _, decl := range f.Decls {
			fn := ""
			if fd, ok := decl.(*ast.FuncDecl); ok {
				fn = fd.Name.Name
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					if instead, ok := gone[n.Name]; ok {
						t.Errorf("%s names %s, which is gone: %s", fset.Position(n.Pos()), n.Name, instead)
					}
				case *ast.SelectorExpr:
					// s.sched.Complete: the scheduler's, not the RPC's.
					if x, ok := n.X.(*ast.SelectorExpr); ok && inExecution && x.Sel.Name == "sched" && n.Sel.Name == "Complete" {
						calls = append(calls, fn)
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0] != "complete" {
		t.Errorf("the worker service calls the scheduler's Complete from %v, want only from complete", calls)
	}
}
