package comm

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// TestStartOverlaps: a rank starts a broadcast on one group, runs an
// all-reduce on another while it is in flight, then waits; both complete
// with the right data and bytes.
func TestStartOverlaps(t *testing.T) {
	w, _ := NewWorld(2)
	prefetch, _ := w.Group("prefetch", 0, 1)
	compute, _ := w.Group("compute", 0, 1)
	var wg sync.WaitGroup
	got := make([][]float32, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			weights := make([]float32, 4)
			if r == 0 {
				copy(weights, []float32{1, 2, 3, 4})
			}
			p := prefetch.Comm(r).Start(context.Background(), func(ctx context.Context, c *Comm) error {
				return c.Broadcast(ctx, weights, 0)
			})
			x := []float32{float32(r + 1)}
			if err := compute.Comm(r).AllReduce(context.Background(), x); err != nil || x[0] != 3 {
				t.Errorf("rank %d: all-reduce %v, %v", r, x, err)
			}
			if err := p.Wait(); err != nil {
				t.Error(err)
			}
			got[r] = weights
		}()
	}
	wg.Wait()
	if !slices.Equal(got[1], []float32{1, 2, 3, 4}) {
		t.Fatalf("rank 1 received %v", got[1])
	}
	if c := w.Stats().Group("prefetch"); c.Calls != 2 || c.RecvBytes != 16 {
		t.Fatalf("prefetch traffic %+v", c)
	}
}

// TestStartFailure: a started collective whose peer never comes fails
// when its context is cancelled, and Wait reports it.
func TestStartFailure(t *testing.T) {
	w, _ := NewWorld(2)
	g, _ := w.Group("g", 0, 1)
	ctx, cancel := context.WithCancel(context.Background())
	p := g.Comm(0).Start(ctx, func(ctx context.Context, c *Comm) error { return c.AllReduce(ctx, make([]float32, 2)) })
	cancel()
	if err := p.Wait(); !errors.Is(err, ErrAborted) {
		t.Fatalf("Wait = %v, want an abort", err)
	}
}
