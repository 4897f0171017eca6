package tensor

import (
	"math"
	"testing"
)

// TestRowIndependent: rows of a product of at least RowIndependentMin
// rows equal, bit for bit (to float32 rounding without RowsExact), the
// same rows of the whole product, for every
// weight format, at offsets not aligned to the micro-kernel's tiles and
// with K beyond one kc block.
func TestRowIndependent(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	const m, k, n = 150, 2100, 40 // k: past one slab of gemmBF16 (2,048) too
	x := make([]float32, m*k)
	w := make([]float32, n*k)
	for i := range x {
		x[i] = float32((i*7919)%1000)/997 - 0.5
	}
	for i := range w {
		w[i] = float32((i*104729)%1000)/991 - 0.5
	}
	f32 := NewWeightsF32(w, n, k)
	bf := make([]uint16, len(w))
	for i, v := range w {
		bf[i] = ToBF16(v)
	}
	for _, wt := range []*Weights{f32, NewWeightsBF16(bf, n, k), QuantizeQ8_0(p, f32)} {
		full := make([]float32, m*n)
		MatMulW(p, full, x, wt, m)
		for _, span := range [][2]int{{0, RowIndependentMin}, {7, 7 + RowIndependentMin}, {40, 149}, {1, m}} {
			lo, hi := span[0], span[1]
			y := make([]float32, (hi-lo)*n)
			MatMulW(p, y, x[lo*k:hi*k], wt, hi-lo)
			for i := range y {
				if d := y[i] - full[lo*n+i]; d != 0 && (RowsExact || math.Abs(float64(d)) > 1e-4) { // 2,100 terms of |x·w| ≤ 0.25: their rounding
					t.Fatalf("%s rows [%d, %d): element %d is %v, in the whole product %v", wt.DType(), lo, hi, i, y[i], full[lo*n+i])
				}
			}
		}
	}
}
