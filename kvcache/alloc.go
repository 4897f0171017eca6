package kvcache

import "fmt"

// Allocator hands out block ids of one cache. It is not safe for concurrent
// use; the scheduler owns it.
type Allocator struct {
	free  []int // stack of free block ids
	owned []bool
}

// NewAllocator manages blocks 0..numBlocks-1, all free.
func NewAllocator(numBlocks int) *Allocator {
	a := &Allocator{free: make([]int, numBlocks), owned: make([]bool, numBlocks)}
	for i := range a.free {
		a.free[i] = numBlocks - 1 - i // hand out low ids first
	}
	return a
}

// Allocate returns n blocks, or false (and nothing) when fewer are free.
func (a *Allocator) Allocate(n int) ([]int, bool) {
	if n < 0 || n > len(a.free) {
		return nil, false
	}
	out := make([]int, n)
	for i := range out {
		b := a.free[len(a.free)-1]
		a.free = a.free[:len(a.free)-1]
		a.owned[b] = true
		out[i] = b
	}
	return out, true
}

// Free returns blocks to the pool. Freeing a block that is not allocated is
// an error and frees nothing.
func (a *Allocator) Free(blocks []int) error {
	for i, b := range blocks {
		if b < 0 || b >= len(a.owned) || !a.owned[b] {
			for _, r := range blocks[:i] {
				a.owned[r] = true
			}
			return fmt.Errorf("kvcache: free of block %d that is not allocated", b)
		}
		a.owned[b] = false
	}
	a.free = append(a.free, blocks...)
	return nil
}

// NumFree is the number of free blocks.
func (a *Allocator) NumFree() int { return len(a.free) }

// NumBlocks is the total number of blocks managed.
func (a *Allocator) NumBlocks() int { return len(a.owned) }
