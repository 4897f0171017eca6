package kvcache

import (
	"slices"
	"testing"
)

// TestHostStoreReshards pushes a KV cache split by layers (two pipeline
// stages) and pulls it split by heads (two TP ranks) into other blocks:
// every value arrives where it belongs, and the bytes are the slices'.
func TestHostStoreReshards(t *testing.T) {
	const layers, heads, bs, d = 4, 4, 2, 3
	host, err := NewHostStore(Layout{Layers: layers, KVHeads: heads, HeadDim: d, BlockSize: bs, NumBlocks: 5})
	if err != nil {
		t.Fatal(err)
	}
	// The value of (layer, head, slot, dim) of device block b: unique.
	val := func(layer, head, b, slot, dim int) float32 {
		return float32(layer*10000 + head*1000 + b*100 + slot*10 + dim)
	}
	stages := []Slice{{0, 2, 0, heads}, {2, 4, 0, heads}}
	devBlocks, hostBlocks := []int{3, 0}, []int{4, 1}
	for _, s := range stages {
		c, _ := New(Layout{Layers: 2, KVHeads: heads, HeadDim: d, BlockSize: bs, NumBlocks: 4})
		for _, b := range devBlocks {
			for l := 0; l < 2; l++ {
				for h := 0; h < heads; h++ {
					k, v := c.Keys(l, b, h), c.Values(l, b, h)
					for i := range k {
						k[i] = val(s.LayerLo+l, h, b, i/d, i%d)
						v[i] = -k[i]
					}
				}
			}
		}
		n, err := host.Push(c, s, devBlocks, hostBlocks)
		if err != nil || n != 4*2*s.Elems(bs, d) {
			t.Fatalf("push %+v: %d bytes, %v", s, n, err)
		}
	}
	// HND: a range of heads of one layer of a block is one contiguous run.
	if host.Offset(1, 2, 3)-host.Offset(1, 2, 1) != 2*bs*d || host.Offset(1, 3, 0)-host.Offset(1, 2, 0) != heads*bs*d {
		t.Fatal("host blocks are not [layer][head][slot][dim]")
	}
	for tp := 0; tp < 2; tp++ {
		s := Slice{0, layers, 2 * tp, 2*tp + 2}
		c, _ := New(Layout{Layers: layers, KVHeads: 2, HeadDim: d, BlockSize: bs, NumBlocks: 6})
		to := []int{5, 2}
		if _, err := host.Pull(c, s, to, hostBlocks); err != nil {
			t.Fatal(err)
		}
		for i, b := range to {
			for l := 0; l < layers; l++ {
				for h := 0; h < 2; h++ {
					want := make([]float32, bs*d)
					for j := range want {
						want[j] = val(l, s.HeadLo+h, devBlocks[i], j/d, j%d)
					}
					if !slices.Equal(c.Keys(l, b, h), want) || c.Values(l, b, h)[1] != -want[1] {
						t.Fatalf("rank %d layer %d head %d block %d: %v, want %v", tp, l, h, b, c.Keys(l, b, h), want)
					}
				}
			}
		}
	}
	c, _ := New(Layout{Layers: 2, KVHeads: heads, HeadDim: d, BlockSize: bs, NumBlocks: 4})
	for _, bad := range []struct {
		s          Slice
		dev, hostB []int
	}{
		{Slice{0, 3, 0, heads}, []int{0}, []int{0}}, // slice does not match the cache
		{Slice{3, 5, 0, heads}, []int{0}, []int{0}}, // outside the store
		{Slice{0, 2, 0, heads}, []int{4}, []int{0}}, // device block out of range
		{Slice{0, 2, 0, heads}, []int{0}, []int{5}}, // host block out of range
		{Slice{0, 2, 0, heads}, []int{0, 1}, []int{0}},
	} {
		if _, err := host.Push(c, bad.s, bad.dev, bad.hostB); err == nil {
			t.Errorf("push %+v %v→%v accepted", bad.s, bad.dev, bad.hostB)
		}
	}
}
