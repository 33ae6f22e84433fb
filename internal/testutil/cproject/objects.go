package cproject

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ReadObjects reads the project's object files, and their dependency
// files (.d) when the build wrote them, by name relative to Dir.
func (p *Project) ReadObjects() (map[string][]byte, error) {
	objs := map[string][]byte{}
	for _, o := range p.Objects() {
		b, err := os.ReadFile(filepath.Join(p.Dir, o))
		if err != nil {
			return nil, fmt.Errorf("object missing after the build: %w", err)
		}
		objs[o] = b
		d := strings.TrimSuffix(o, ".o") + ".d"
		if b, err := os.ReadFile(filepath.Join(p.Dir, d)); err == nil {
			objs[d] = b
		}
	}
	return objs, nil
}

// Clean removes the project's build outputs (build/ and the app).
func (p *Project) Clean() error {
	for _, name := range []string{"build", "app"} {
		if err := os.RemoveAll(filepath.Join(p.Dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// DifferingObjects returns, sorted, the names of want whose bytes differ
// in got (or are missing from it).
func DifferingObjects(want, got map[string][]byte) []string {
	var differ []string
	for name, w := range want {
		if g, ok := got[name]; !ok || !bytes.Equal(w, g) {
			differ = append(differ, name)
		}
	}
	sort.Strings(differ)
	return differ
}
