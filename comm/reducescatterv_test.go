package comm_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
)

// TestReduceScatterV: unequal chunks (empty ones included) against the
// member-order sum, bit for bit, with the ring's byte count: every member
// sends all chunks but its own, (P−1)·sum(counts) elements over the
// group; members that disagree on the counts abort the world.
func TestReduceScatterV(t *testing.T) {
	for _, p := range sizes {
		t.Run(fmt.Sprintf("P=%d", p), func(t *testing.T) {
			w := newWorld(t, p)
			for _, counts := range [][]int{make([]int, p), ramp(p, 1), ramp(p, 1500)} {
				total := 0
				for _, c := range counts {
					total += c
				}
				in := make([][]float32, p)
				for r := range in {
					in[r] = input(uint64(total), r, total)
				}
				want := sumInOrder(in)
				out := make([][]float32, p)
				before := w.Stats()
				runRanks(t, world(w), func(c *comm.Comm) error {
					r := c.Rank()
					out[r] = make([]float32, counts[r])
					return c.ReduceScatterV(bg, in[r], out[r], counts)
				})
				off := 0
				for r := range out {
					sameBits(t, fmt.Sprintf("counts=%v rank %d", counts, r), out[r], want[off:off+counts[r]])
					off += counts[r]
				}
				got := w.Stats().Sub(before).Kind(comm.KindReduceScatter)
				if want := int64(p-1) * int64(total) * 4; got.SentBytes != want || got.RecvBytes != want {
					t.Fatalf("counts=%v: sent %d received %d bytes, want %d each", counts, got.SentBytes, got.RecvBytes, want)
				}
			}
			if p < 2 {
				return
			}
			g, err := w.Group("bad", ranksOf(p)...)
			if err != nil {
				t.Fatal(err)
			}
			errs := make([]error, p)
			done := make(chan int)
			for r := range p {
				go func() {
					counts := ramp(p, 1)
					if r == 1 {
						counts[0], counts[1] = counts[1], counts[0]
					}
					total := (p * (p + 1)) / 2
					errs[r] = g.Comm(r).ReduceScatterV(bg, make([]float32, total), make([]float32, counts[r]), counts)
					done <- r
				}()
			}
			for range p {
				<-done
			}
			for r, err := range errs {
				if !errors.Is(err, comm.ErrAborted) {
					t.Fatalf("rank %d with mismatched counts: %v, want an abort", r, err)
				}
			}
		})
	}
}

// ramp is counts k, 2k, …, p·k.
func ramp(p, k int) []int {
	c := make([]int, p)
	for i := range c {
		c[i] = (i + 1) * k
	}
	return c
}

func ranksOf(p int) []int {
	r := make([]int, p)
	for i := range r {
		r[i] = i
	}
	return r
}
