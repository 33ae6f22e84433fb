package platform

import "testing"

// FuzzParseRequest parses arbitrary action platforms (client input): no
// panic, and an accepted request keeps its invariants.
func FuzzParseRequest(f *testing.F) {
	f.Add("min-cores", "2", "max-cores", "4")
	f.Add("resource:gpu", "1", "resource:gpu", "9223372036854775807")
	f.Add("Worker", "w1", "min-mem", "-1")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		ps := Properties{{n1, v1}, {n2, v2}}
		ps.Sort()
		r, err := ParseRequest(ps)
		if err != nil {
			return
		}
		if r.Cores < 1 || (r.MaxCores != 0 && r.MaxCores < r.Cores) || r.MinMem < 0 {
			t.Fatalf("accepted request %+v breaks its invariants", r)
		}
		for name, n := range r.Resources {
			if name == "" || n <= 0 {
				t.Fatalf("accepted resource %q=%d", name, n)
			}
		}
		_ = ps.Key()
		_ = ps.String()
	})
}
