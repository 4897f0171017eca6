package tensor

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkPoolRun times Pool.Run on 2 threads with next to no work (each
// chunk adds to a counter), after the caller has worked alone for gap: the
// hand-off's cost, which a decode step pays once per parallel op (about
// 100 times a token for a 12-layer model). With no gap the worker is still
// awake from the last Run; after a longer gap the Go scheduler has parked
// it and Run waits for the OS to wake a thread.
func BenchmarkPoolRun(b *testing.B) {
	for _, gap := range []time.Duration{0, 5 * time.Microsecond, 50 * time.Microsecond, 500 * time.Microsecond} {
		b.Run(fmt.Sprintf("gap=%v", gap), func(b *testing.B) {
			p := NewPool(2)
			defer p.Close()
			var sink [2]int64
			var spent time.Duration
			for i := 0; i < b.N; i++ {
				for start := time.Now(); time.Since(start) < gap; {
				}
				start := time.Now()
				p.Run(2, func(lo, hi int) { sink[lo]++ })
				spent += time.Since(start)
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N)/1e3, "µs/run")
		})
	}
}
