package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// reshapeCases are one matrix in every format, with k not a multiple of
// the Q8_0 block so that padding is exercised.
func reshapeCases(n, k int) map[DType]*Weights {
	r := rand.New(rand.NewPCG(5, 6))
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	f := NewWeightsF32(w, n, k)
	return map[DType]*Weights{F32: f, BF16: Convert(nil, f, BF16), F16: Convert(nil, f, F16), Q8_0: Convert(nil, f, Q8_0)}
}

func rowsOf(w *Weights) [][]float32 {
	n, k := w.Shape()
	out := make([][]float32, n)
	for j := range out {
		out[j] = make([]float32, k)
		w.Row(j, out[j])
	}
	return out
}

func TestWeightsRowsAndCols(t *testing.T) {
	const n, k = 7, 150
	pool := NewPool(2)
	defer pool.Close()
	for d, w := range reshapeCases(n, k) {
		full := rowsOf(w)
		v := w.Rows(2, 6)
		if vn, vk := v.Shape(); vn != 4 || vk != k || v.DType() != d || v.Bytes() != BytesFor(d, 4, k) {
			t.Fatalf("%v: Rows(2, 6) is %d×%d %v of %d bytes", d, vn, vk, v.DType(), v.Bytes())
		}
		for j, row := range rowsOf(v) {
			for c := range row {
				if row[c] != full[j+2][c] {
					t.Fatalf("%v: Rows(2, 6) row %d col %d = %v, want %v", d, j, c, row[c], full[j+2][c])
				}
			}
		}
		if w.Cols(pool, 0, k) != w {
			t.Fatalf("%v: Cols of every column is not w", d)
		}
		for _, span := range [][2]int{{32, 96}, {64, k}, {0, 64}, {10, 75}, {3, 4}} {
			lo, hi := span[0], span[1]
			c := w.Cols(pool, lo, hi)
			if cn, ck := c.Shape(); cn != n || ck != hi-lo || c.DType() != d || c.Bytes() != BytesFor(d, n, hi-lo) {
				t.Fatalf("%v: Cols(%d, %d) is %d×%d %v of %d bytes", d, lo, hi, cn, ck, c.DType(), c.Bytes())
			}
			exact := d != Q8_0 || lo%Q8Block == 0 && (hi%Q8Block == 0 || hi == k)
			for j, row := range rowsOf(c) {
				for i, got := range row {
					want := full[j][lo+i]
					if exact && got != want {
						t.Fatalf("%v: Cols(%d, %d) row %d col %d = %v, want %v exactly", d, lo, hi, j, i, got, want)
					}
					// Re-quantized in blocks starting at lo: half a step of
					// the new block's scale, max|block|/127.
					b := i / Q8Block * Q8Block
					amax := float32(0)
					for _, x := range full[j][lo+b : min(lo+b+Q8Block, hi)] {
						amax = max(amax, float32(math.Abs(float64(x))))
					}
					if diff := math.Abs(float64(got - want)); diff > float64(amax/127)*0.5001+1e-6 {
						t.Fatalf("%v: Cols(%d, %d) row %d col %d = %v, want %v within half a step of %v", d, lo, hi, j, i, got, want, amax/127)
					}
				}
			}
			// The product with the cut equals the product of the cut rows.
			x := make([]float32, 3*(hi-lo))
			for i := range x {
				x[i] = float32(i%7) - 3
			}
			y := make([]float32, 3*n)
			MatMulW(pool, y, x, c, 3)
			for i := range 3 {
				for j := range n {
					var ref float64
					for kk := range hi - lo {
						var wv [1]float32
						c.Segment(j, kk, wv[:])
						ref += float64(x[i*(hi-lo)+kk]) * float64(wv[0])
					}
					if tol := 1e-4 * (1 + math.Abs(ref)) * float64(hi-lo) / 8; d != Q8_0 && math.Abs(float64(y[i*n+j])-ref) > tol {
						t.Fatalf("%v: Cols(%d, %d) product [%d,%d] = %v, want %v", d, lo, hi, i, j, y[i*n+j], ref)
					}
				}
			}
		}
	}
}

func TestConvert(t *testing.T) {
	const n, k = 5, 70
	cases := reshapeCases(n, k)
	for from, w := range cases {
		src := rowsOf(w)
		for _, to := range []DType{F32, BF16, F16, Q8_0} {
			t.Run(fmt.Sprintf("%v→%v", from, to), func(t *testing.T) {
				c := Convert(nil, w, to)
				if to == from && c != w {
					t.Fatal("converting to the same format copied")
				}
				if c.DType() != to || c.Bytes() != BytesFor(to, n, k) {
					t.Fatalf("got %v of %d bytes", c.DType(), c.Bytes())
				}
				got := rowsOf(c)
				for j := range got {
					for i, v := range got[j] {
						var want float32
						switch to {
						case F32:
							want = src[j][i]
						case BF16:
							want = FromBF16(ToBF16(src[j][i]))
						case F16:
							want = FromF16(ToF16(src[j][i]))
						case Q8_0:
							want = v // checked by the quantizer's own tests; here: the same as QuantizeQ8_0
						}
						if v != want {
							t.Fatalf("row %d col %d = %v, want %v", j, i, v, want)
						}
					}
				}
				if to == Q8_0 {
					q := rowsOf(QuantizeQ8_0(nil, w))
					for j := range q {
						for i := range q[j] {
							if q[j][i] != got[j][i] {
								t.Fatalf("Convert to Q8_0 differs from QuantizeQ8_0 at %d,%d", j, i)
							}
						}
					}
				}
			})
		}
	}
}

func TestNewWeightsZero(t *testing.T) {
	for _, d := range []DType{F32, BF16, F16, Q8_0} {
		w := NewWeights(d, 3, 40)
		if w.Bytes() != BytesFor(d, 3, 40) {
			t.Fatalf("%v: %d bytes, want %d", d, w.Bytes(), BytesFor(d, 3, 40))
		}
		x := make([]float32, 40)
		for i := range x {
			x[i] = float32(i) - 20
		}
		y := []float32{1, 2, 3}
		MatMulW(nil, y, x, w, 1)
		if y[0] != 0 || y[1] != 0 || y[2] != 0 {
			t.Fatalf("%v: zero matrix product %v", d, y)
		}
	}
	w := NewWeights(BF16, 2, 3)
	EncodeBF16(w.Half(), []float32{1, 2, 3, 4, 5, 6})
	row := make([]float32, 3)
	w.Row(1, row)
	if row[0] != 4 || row[2] != 6 || NewWeights(F32, 1, 1).F32() == nil || w.F32() != nil {
		t.Fatalf("filled BF16 row %v", row)
	}
}
