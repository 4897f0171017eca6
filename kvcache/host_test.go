package kvcache

import (
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/tensor"
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

// TestHostStoreHalfBitExact pushes a BF16 cache split by layers and pulls
// it split by heads, as TestHostStoreReshards does: every stored 16-bit
// pattern (NaN payloads and subnormals among them) arrives unchanged, the
// bytes are 2 per element, and a cache of another dtype is refused.
func TestHostStoreHalfBitExact(t *testing.T) {
	const layers, heads, bs, d = 2, 2, 3, 2
	host, err := NewHostStore(Layout{Layers: layers, KVHeads: heads, HeadDim: d, BlockSize: bs, NumBlocks: 3, DType: tensor.BF16})
	if err != nil {
		t.Fatal(err)
	}
	pattern := func(layer, head, slot, dim int, keys bool) uint16 {
		p := []uint16{0x7f81, 0xffc1, 0x0001, 0x8000, 0x3f80, 0x7f80}[(layer+head+slot+dim)%6]
		p ^= uint16(layer<<12 | head<<10 | slot<<8 | dim<<6)
		if !keys {
			p = ^p
		}
		return p
	}
	for l := 0; l < layers; l++ {
		c, _ := New(Layout{Layers: 1, KVHeads: heads, HeadDim: d, BlockSize: bs, NumBlocks: 2, DType: tensor.BF16})
		for h := 0; h < heads; h++ {
			k, v := c.HalfKeys(0, 1, h), c.HalfValues(0, 1, h)
			for i := range k {
				k[i], v[i] = pattern(l, h, i/d, i%d, true), pattern(l, h, i/d, i%d, false)
			}
		}
		n, err := host.Push(c, Slice{l, l + 1, 0, heads}, []int{1}, []int{2})
		if err != nil || n != 2*heads*bs*d*2 {
			t.Fatalf("push layer %d: %d bytes, %v", l, n, err)
		}
	}
	for h := 0; h < heads; h++ {
		c, _ := New(Layout{Layers: layers, KVHeads: 1, HeadDim: d, BlockSize: bs, NumBlocks: 1, DType: tensor.BF16})
		if _, err := host.Pull(c, Slice{0, layers, h, h + 1}, []int{0}, []int{2}); err != nil {
			t.Fatal(err)
		}
		for l := 0; l < layers; l++ {
			k, v := c.HalfKeys(l, 0, 0), c.HalfValues(l, 0, 0)
			for i := range k {
				if k[i] != pattern(l, h, i/d, i%d, true) || v[i] != pattern(l, h, i/d, i%d, false) {
					t.Fatalf("layer %d head %d element %d: %#04x %#04x", l, h, i, k[i], v[i])
				}
			}
			if !slices.Equal(host.HalfKeys(2, l, h), k) {
				t.Fatalf("host keys of layer %d head %d = %#04x", l, h, host.HalfKeys(2, l, h))
			}
		}
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		c, _ := New(Layout{Layers: layers, KVHeads: heads, HeadDim: d, BlockSize: bs, NumBlocks: 1, DType: dt})
		if _, err := host.Push(c, Slice{0, layers, 0, heads}, []int{0}, []int{0}); err == nil || !strings.Contains(err.Error(), "one dtype") {
			t.Errorf("a %s cache pushed to a bf16 store: %v", dt, err)
		}
	}
}
