package runner

import (
	"testing"
)

// BenchmarkStartWait measures one action (/bin/true) from Start to the end
// of Wait, with each containment mechanism (the cgroup one adds a mkdir,
// the cgroup.events check and rmdir; tracking adds /proc scans and a pid
// file).
func BenchmarkStartWait(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			s, err := newSupervisor(b.TempDir(), quietLog(), m.cgroup)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if m.cgroup && s.cgDir == "" {
				b.Skip("no cgroup v2 here")
			}
			dir := b.TempDir()
			for b.Loop() {
				p, err := s.Start(Spec{Args: []string{"/bin/true"}, Dir: dir})
				if err != nil {
					b.Fatal(err)
				}
				if r := p.Wait(); r.ExitCode != 0 || r.Err != nil {
					b.Fatal(r)
				}
			}
		})
	}
}

// BenchmarkScanProcs measures one scan of /proc, what tracking does every
// 250ms while actions run and at each signal and end.
func BenchmarkScanProcs(b *testing.B) {
	n := 0
	for b.Loop() {
		n = len(scanProcs())
	}
	b.ReportMetric(float64(n), "procs")
}
