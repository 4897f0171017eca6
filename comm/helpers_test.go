package comm_test

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/comm"
)

// sizes are the group sizes every collective is tested at.
var sizes = []int{1, 2, 3, 4, 8}

// newWorld returns a World of p ranks or fails the test.
func newWorld(t testing.TB, p int) *comm.World {
	t.Helper()
	w, err := comm.NewWorld(p)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// runAll runs f(i) for i in [0, n) on n goroutines and returns their errors,
// failing the test if they do not all return within 10 s.
func runAll(t testing.TB, n int, f func(i int) error) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("ranks still running after 10 s: deadlock")
	}
	return errs
}

// runRanks runs f on every member of g concurrently, failing on any error.
func runRanks(t testing.TB, g *comm.Group, f func(c *comm.Comm) error) {
	t.Helper()
	ranks := g.Ranks()
	for i, err := range runAll(t, len(ranks), func(i int) error { return f(g.Comm(ranks[i])) }) {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
}

// input returns n pseudo-random values in [-1, 1) for (seed, rank): values
// with full mantissas, so that a different summation order shows up in the
// low bits.
func input(seed uint64, rank, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)))
	v := make([]float32, n)
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	return v
}

// sumInOrder is the sequential reference reduction: element-wise float32
// sum of xs[0], xs[1], … in that order.
func sumInOrder(xs [][]float32) []float32 {
	out := append([]float32(nil), xs[0]...)
	for _, x := range xs[1:] {
		for i := range out {
			out[i] += x[i]
		}
	}
	return out
}

// sameBits fails the test unless got and want are bit-identical.
func sameBits(t testing.TB, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: len %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// settleGoroutines waits up to 2 s for the goroutine count to drop to at
// most want and returns the last count seen.
func settleGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); n > want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

var bg = context.Background()
