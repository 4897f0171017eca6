package kvcache

import (
	"slices"
	"testing"
)

func TestPutAndRead(t *testing.T) {
	c, err := New(Layout{Layers: 2, KVHeads: 2, HeadDim: 3, BlockSize: 4, NumBlocks: 5})
	if err != nil {
		t.Fatal(err)
	}
	table := []int{3, 1}
	for pos := 0; pos < 8; pos++ {
		k := []float32{float32(pos), 1, 2, float32(-pos), 3, 4}
		v := []float32{10, float32(pos), 0, 20, float32(pos), 0}
		c.Put(1, table, pos, k, v)
	}
	// position 6 is block table[1] = 1, slot 2.
	if got := c.Keys(1, 1, 1)[2*3 : 3*3]; !slices.Equal(got, []float32{-6, 3, 4}) {
		t.Fatalf("keys of head 1 at position 6 = %v", got)
	}
	if got := c.Values(1, 3, 0)[1*3 : 2*3]; !slices.Equal(got, []float32{10, 1, 0}) {
		t.Fatalf("values of head 0 at position 1 = %v", got)
	}
	if got := c.Keys(0, 3, 0)[:3]; !slices.Equal(got, []float32{0, 0, 0}) {
		t.Fatalf("layer 0 was written: %v", got)
	}
	// Heads 0–1 of block 1 are one run: head 0's slots, then head 1's.
	if got := c.KeyHeads(1, 1, 0, 2); len(got) != 2*4*3 || !slices.Equal(got[4*3:], c.Keys(1, 1, 1)) || !slices.Equal(got[:4*3], c.Keys(1, 1, 0)) {
		t.Fatalf("keys of heads [0,2) of block 1 = %v", got)
	}
	if got := c.ValueHeads(1, 3, 1, 2); !slices.Equal(got, c.Values(1, 3, 1)) {
		t.Fatalf("values of heads [1,2) of block 3 = %v", got)
	}
	if c.Bytes() != 2*4*2*5*2*4*3 || c.BlocksFor(9) != 3 {
		t.Fatalf("Bytes %d BlocksFor(9) %d", c.Bytes(), c.BlocksFor(9))
	}
	if _, err := New(Layout{Layers: 1, KVHeads: 1, HeadDim: 1, BlockSize: MaxBlockSize + 1, NumBlocks: 1}); err == nil {
		t.Fatal("oversized block accepted")
	}
}
