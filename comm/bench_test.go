package comm_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
)

// onRanks runs iters rounds of f on every member of a new world of p ranks:
// members 1..p-1 on helper goroutines started before measure is called,
// member 0 on the calling goroutine inside measure. measure receives the
// function running member 0's rounds, so that it can time them (or count
// their allocations) without the cost of starting goroutines.
func onRanks(tb testing.TB, p, iters int, f func(c *comm.Comm) error, measure func(run func())) {
	w := newWorld(tb, p)
	g := world(w)
	var wg sync.WaitGroup
	errs := make([]error, p)
	loop := func(r int) {
		c := g.Comm(r)
		for range iters {
			if err := f(c); err != nil {
				errs[r] = err
				return
			}
		}
	}
	for r := 1; r < p; r++ {
		wg.Go(func() { loop(r) })
	}
	measure(func() { loop(0); wg.Wait() })
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
}

// Steady-state operations allocate nothing: no per-call buffers,
// goroutines or channels.
func TestNoAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts need a quiet, uninstrumented process")
	}
	const iters = 2000
	for _, tt := range []struct {
		name string
		n    int
	}{{"AllReduceSmall", 64}, {"AllReduceChunked", 20000}} {
		t.Run(tt.name, func(t *testing.T) {
			const p = 4
			bufs := make([][]float32, p)
			for r := range bufs {
				bufs[r] = make([]float32, tt.n)
			}
			other := make([][]float32, p)
			for r := range other {
				other[r] = make([]float32, p*8)
			}
			f := func(c *comm.Comm) error {
				if err := c.AllReduce(bg, bufs[c.Rank()]); err != nil {
					return err
				}
				return c.AllToAll(bg, other[c.Rank()][:p*4], other[c.Rank()][p*4:])
			}
			onRanks(t, p, 10, f, func(run func()) { run() }) // warm up stacks and caches
			var before, after runtime.MemStats
			onRanks(t, p, iters, f, func(run func()) {
				runtime.ReadMemStats(&before)
				run()
				runtime.ReadMemStats(&after)
			})
			if allocs := float64(after.Mallocs-before.Mallocs) / iters; allocs > 0.25 {
				t.Errorf("%.3f allocations per round of %d members, want none per call (only the runtime refilling its caches after a GC)", allocs, p)
			}
		})
	}
}

// BenchmarkAllReduce reports the algorithm bandwidth (buffer bytes per
// second per rank, as SetBytes) and the bus bandwidth (algbw·2(P−1)/P, the
// NCCL convention comparable across P) of an in-process all-reduce.
func BenchmarkAllReduce(b *testing.B) {
	for _, p := range []int{2, 4, 8} {
		for _, size := range []int{4 << 10, 8 << 20} {
			b.Run(fmt.Sprintf("P=%d/%s", p, byteSize(size)), func(b *testing.B) {
				n := size / 4
				bufs := make([][]float32, p)
				for r := range bufs {
					bufs[r] = make([]float32, n)
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				onRanks(b, p, b.N, func(c *comm.Comm) error { return c.AllReduce(bg, bufs[c.Rank()]) }, func(run func()) {
					b.ResetTimer()
					run()
					b.StopTimer()
				})
				algbw := float64(size) * float64(b.N) / b.Elapsed().Seconds() / 1e9
				b.ReportMetric(algbw, "algGB/s")
				b.ReportMetric(algbw*2*float64(p-1)/float64(p), "busGB/s")
			})
		}
	}
}

// BenchmarkLatency is the per-call cost of a tiny operation: one float32
// all-reduce, and a barrier.
func BenchmarkLatency(b *testing.B) {
	for _, p := range []int{2, 4, 8} {
		for _, op := range []struct {
			name string
			f    func(c *comm.Comm, buf []float32) error
		}{
			{"AllReduce1", func(c *comm.Comm, buf []float32) error { return c.AllReduce(bg, buf) }},
			{"Barrier", func(c *comm.Comm, _ []float32) error { return c.Barrier(bg) }},
		} {
			b.Run(fmt.Sprintf("%s/P=%d", op.name, p), func(b *testing.B) {
				bufs := make([][]float32, p)
				for r := range bufs {
					bufs[r] = make([]float32, 1)
				}
				b.ReportAllocs()
				onRanks(b, p, b.N, func(c *comm.Comm) error { return op.f(c, bufs[c.Rank()]) }, func(run func()) {
					b.ResetTimer()
					run()
					b.StopTimer()
				})
			})
		}
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}
