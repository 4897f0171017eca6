package tensor

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

func TestPoolRunCoversRange(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := NewPool(threads)
		for _, n := range []int{0, 1, 2, 3, 7, 8, 9, 100} {
			hits := make([]atomic.Int32, n)
			var calls atomic.Int32
			p.Run(n, func(lo, hi int) {
				calls.Add(1)
				if lo >= hi {
					t.Errorf("threads=%d n=%d: empty chunk [%d,%d)", threads, n, lo, hi)
				}
				for i := lo; i < hi; i++ {
					hits[i].Add(1)
				}
			})
			for i := range hits {
				if h := hits[i].Load(); h != 1 {
					t.Fatalf("threads=%d n=%d: index %d covered %d times", threads, n, i, h)
				}
			}
			if c := int(calls.Load()); c > threads || (n > 0 && c != min(threads, n)) {
				t.Errorf("threads=%d n=%d: %d chunks", threads, n, c)
			}
		}
		p.Close()
		p.Close()
	}
	var nilPool *Pool
	if nilPool.Threads() != 1 {
		t.Errorf("nil pool Threads()=%d", nilPool.Threads())
	}
	ran := false
	nilPool.Run(5, func(lo, hi int) { ran = lo == 0 && hi == 5 })
	if !ran {
		t.Error("nil pool did not run [0,5) inline")
	}
	nilPool.Close()
}

func TestPoolNested(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	var total atomic.Int64
	p.Run(4, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			p.Run(10, func(lo, hi int) { total.Add(int64(hi - lo)) })
		}
	})
	if total.Load() != 40 {
		t.Fatalf("nested Run covered %d, want 40", total.Load())
	}
}

func TestPoolAfterClose(t *testing.T) {
	p := NewPool(4)
	p.Close()
	n := 0
	p.Run(3, func(lo, hi int) { n += hi - lo })
	if n != 3 {
		t.Fatalf("Run after Close covered %d, want 3", n)
	}
}

// TestPoolConcurrentMatMul shares one pool between goroutines that each
// run matrix multiplications, as model ranks do.
func TestPoolConcurrentMatMul(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	const ranks, iters = 4, 5
	var wg sync.WaitGroup
	for g := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 99))
			for it := range iters {
				m := []int{1, 3, 20, 40, 100}[it]
				k, n := 67, 45
				x, w := randSlice(r, m*k), randSlice(r, n*k)
				y := make([]float32, m*n)
				MatMul(p, y, x, w, m, k, n)
				want, scale := refMatMul(nil, x, w, m, k, n)
				for i := range y {
					if !within(y[i], want[i], scale[i], 2e-6) {
						t.Errorf("rank %d iter %d: y[%d]=%v want %v", g, it, i, y[i], want[i])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
