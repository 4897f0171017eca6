package tensor

import "fmt"

// Attention over 16-bit keys and values (a BF16 or F16 KV cache): a
// query's scores against a block of keys, and the scores' weighted sum of
// a block of values, each read once in its stored format and widened in
// registers, accumulated in float32.

// DotRowsHalf sets out[r] = Σ_i x[i]·widen(w[r·len(x)+i]) for r <
// len(out): the products of x with len(out) consecutive rows of len(x)
// BF16 or F16 values (dt). len(w) must be at least len(out)·len(x).
func DotRowsHalf(dt DType, out, x []float32, w []uint16) {
	k := len(x)
	checkHalfRows("tensor.DotRowsHalf", dt, len(out), k, len(w))
	if len(out) == 0 || k == 0 {
		clear(out)
		return
	}
	dotRowsHalf(dt, x, nil, w, k, k, out)
}

// AxpyRowsHalf adds Σ_r a[r]·widen(w[r·len(y)+i]) to y[i] for every i,
// row by row in order: the result is bit for bit that of widening each
// row and adding it with Axpy(a[r], row, y), but y stays in registers
// across the rows. len(w) must be at least len(a)·len(y).
func AxpyRowsHalf(dt DType, y, a []float32, w []uint16) {
	n := len(y)
	checkHalfRows("tensor.AxpyRowsHalf", dt, len(a), n, len(w))
	if len(a) == 0 || n == 0 {
		return
	}
	axpyRowsHalf(dt, y, a, w)
}

func checkHalfRows(name string, dt DType, rows, k, lw int) {
	if dt != BF16 && dt != F16 {
		panic(fmt.Sprintf("%s: dtype %s, want bf16 or f16", name, dt))
	}
	if lw < rows*k {
		panic(fmt.Sprintf("%s: len(w)=%d < %d rows × %d", name, lw, rows, k))
	}
}

// axpyRowsHalfGo is the portable axpyRowsHalf: each row widened into a
// buffer a chunk at a time and added by axpy.
func axpyRowsHalfGo(dt DType, y, a []float32, w []uint16) {
	var buf [256]float32
	n := len(y)
	for r, s := range a {
		row := w[r*n : (r+1)*n]
		for c0 := 0; c0 < n; c0 += len(buf) {
			c := min(len(buf), n-c0)
			if dt == BF16 {
				decodeBF16(buf[:c], row[c0:c0+c])
			} else {
				decodeF16(buf[:c], row[c0:c0+c])
			}
			axpy(s, buf[:c], y[c0:c0+c])
		}
	}
}
