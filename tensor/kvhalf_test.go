package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// halfRows returns rows×n random values narrowed to dt, and their widened
// float32 values.
func halfRows(r *rand.Rand, dt DType, rows, n int) ([]uint16, []float32) {
	w, f := make([]uint16, rows*n), make([]float32, rows*n)
	for i := range w {
		v := float32(r.NormFloat64())
		if dt == BF16 {
			w[i] = ToBF16(v)
			f[i] = FromBF16(w[i])
		} else {
			w[i] = ToF16(v)
			f[i] = FromF16(w[i])
		}
	}
	return w, f
}

// TestDotRowsHalf checks DotRowsHalf against float64 sums of the widened
// rows, under every kernel set, for head sizes around the vector widths.
func TestDotRowsHalf(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, dt := range []DType{BF16, F16} {
			for _, n := range []int{1, 7, 8, 31, 32, 64, 65, 100, 128, 256} {
				for _, rows := range []int{1, 5, 16} {
					x := randSlice(r, n)
					w, f := halfRows(r, dt, rows+1, n) // a spare row: only rows are read
					out := make([]float32, rows+1)
					out[rows] = 42
					DotRowsHalf(dt, out[:rows], x, w)
					for j := range rows {
						var want, scale float64
						for i := range n {
							p := float64(x[i]) * float64(f[j*n+i])
							want, scale = want+p, scale+math.Abs(p)
						}
						if !within(out[j], want, scale, 1e-6) {
							t.Fatalf("%s n=%d rows=%d: row %d = %v, want %v", dt, n, rows, j, out[j], want)
						}
					}
					if out[rows] != 42 {
						t.Fatalf("%s n=%d: wrote past the rows", dt, n)
					}
				}
			}
		}
	})
}

// TestAxpyRowsHalf checks that AxpyRowsHalf is bit for bit the rows
// widened and added one by one with Axpy, under every kernel set.
func TestAxpyRowsHalf(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, dt := range []DType{BF16, F16} {
			for _, n := range []int{1, 7, 8, 9, 31, 32, 40, 64, 65, 100, 128, 300} {
				for _, rows := range []int{1, 3, 16} {
					a := randSlice(r, rows)
					w, f := halfRows(r, dt, rows, n)
					y := randSlice(r, n+1)
					want := append([]float32(nil), y...)
					for j := range rows {
						Axpy(a[j], f[j*n:(j+1)*n], want[:n])
					}
					AxpyRowsHalf(dt, y[:n], a, w)
					for i := range y {
						if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s n=%d rows=%d: y[%d] = %v, want %v", dt, n, rows, i, y[i], want[i])
						}
					}
				}
			}
		}
	})
}

// TestHalfRowsChecks checks the panics on a wrong dtype and a short w.
func TestHalfRowsChecks(t *testing.T) {
	for name, f := range map[string]func(){
		"f32 dtype": func() { DotRowsHalf(F32, make([]float32, 1), make([]float32, 8), make([]uint16, 8)) },
		"short w":   func() { AxpyRowsHalf(BF16, make([]float32, 8), make([]float32, 2), make([]uint16, 15)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
