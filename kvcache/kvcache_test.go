package kvcache

import (
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/tensor"
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

// TestHalfPutAndRead stores keys and values in BF16 and F16 caches: Put
// rounds to nearest with ties to even, the stored patterns are the
// expected ones, Get widens them exactly, and the layout's bytes are half
// of float32's.
func TestHalfPutAndRead(t *testing.T) {
	const d = 4
	// 1+2⁻⁸ and 1+3·2⁻⁸ are ties in BF16 (7 mantissa bits), to 1 and to
	// 1+2⁻⁶; 1+2⁻¹¹ and 1+3·2⁻¹¹ the same in F16 (10 bits).
	k := []float32{1 + 1.0/256, 1 + 3.0/256, -2, 0.1, 1 + 1.0/2048, 1 + 3.0/2048, 65504, 1e-7}
	v := []float32{3, -0.5, 1e30, 0, 7, 8, 9, 10}
	for _, tc := range []struct {
		dt     tensor.DType
		keys   []uint16 // head 0 then head 1 of k, as stored
		widen  func(uint16) float32
		values uint16 // v[1] as stored
	}{
		{tensor.BF16, []uint16{0x3f80, 0x3f82, 0xc000, 0x3dcd, 0x3f80, 0x3f80, 0x4780, 0x33d7}, tensor.FromBF16, 0xbf00},
		{tensor.F16, []uint16{0x3c04, 0x3c0c, 0xc000, 0x2e66, 0x3c00, 0x3c02, 0x7bff, 0x0002}, tensor.FromF16, 0xb800},
	} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			l := Layout{Layers: 2, KVHeads: 2, HeadDim: d, BlockSize: 3, NumBlocks: 4, DType: tc.dt}
			c, err := New(l)
			if err != nil {
				t.Fatal(err)
			}
			table := []int{2, 0}
			c.Put(1, table, 4, k, v) // block 0, slot 1
			got := append(slices.Clone(c.HalfKeys(1, 0, 0)[d:2*d]), c.HalfKeys(1, 0, 1)[d:2*d]...)
			if !slices.Equal(got, tc.keys) {
				t.Fatalf("stored keys %#04x, want %#04x", got, tc.keys)
			}
			if got := c.HalfValues(1, 0, 0)[d+1]; got != tc.values {
				t.Fatalf("stored value %#04x, want %#04x", got, tc.values)
			}
			gk, gv := make([]float32, 2*d), make([]float32, 2*d)
			c.Get(1, table, 4, gk, gv)
			for i := range gk {
				if gk[i] != tc.widen(tc.keys[i]) {
					t.Fatalf("Get key %d = %v, want %v", i, gk[i], tc.widen(tc.keys[i]))
				}
			}
			if gv[1] != -0.5 || gv[4] != 7 {
				t.Fatalf("Get values %v", gv)
			}
			if c.HalfKeys(0, 0, 0)[d] != 0 || c.HalfKeys(1, 2, 0)[d] != 0 {
				t.Fatal("other layers or blocks were written")
			}
			if l.ElemBytes() != 2 || l.TokenBytes() != 2*2*2*2*d || l.Bytes() != (Layout{Layers: 2, KVHeads: 2, HeadDim: d, BlockSize: 3, NumBlocks: 4}).Bytes()/2 {
				t.Fatalf("ElemBytes %d TokenBytes %d Bytes %d", l.ElemBytes(), l.TokenBytes(), l.Bytes())
			}
			assertPanics(t, "Keys of a 16-bit cache", func() { c.Keys(0, 0, 0) })
			assertPanics(t, "KeyHeads of a 16-bit cache", func() { c.KeyHeads(0, 0, 0, 1) })
		})
	}
	f32, _ := New(Layout{Layers: 1, KVHeads: 1, HeadDim: 1, BlockSize: 1, NumBlocks: 1})
	assertPanics(t, "HalfValues of an F32 cache", func() { f32.HalfValues(0, 0, 0) })
	if _, err := New(Layout{Layers: 1, KVHeads: 1, HeadDim: 1, BlockSize: 1, NumBlocks: 1, DType: tensor.Q8_0}); err == nil {
		t.Fatal("a Q8_0 cache was accepted")
	}
}

func assertPanics(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}
