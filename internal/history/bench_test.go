package history

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/statestore"
)

// BenchmarkRecordFull is the cost of recording a finished operation once
// the history is at its bounds (the default 10,000 operations and 1,000
// builds): the steady state of a busy server, where every record also
// drops the oldest.
func BenchmarkRecordFull(b *testing.B) {
	r, err := New(context.Background(), statestore.NewMemory(), Options{MaxOperations: 10000, MaxBuilds: 1000, MaxAge: 168 * time.Hour}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	t0 := time.Now()
	for i := range 12000 {
		r.Record(op(fmt.Sprintf("warm-%d", i), fmt.Sprintf("build-%d", i%1200), t0.Add(time.Duration(i)*time.Millisecond), time.Millisecond, false, 0))
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		r.Record(op(fmt.Sprintf("op-%d", i), fmt.Sprintf("build-%d", i%1200), t0.Add(time.Duration(12000+i)*time.Millisecond), time.Millisecond, false, 0))
	}
}
