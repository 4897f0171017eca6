package tensor

import "math"

// Portable Go kernels. They are the whole implementation on CPUs without
// AVX2/FMA and in noasm builds, and finish the tails that the assembly
// kernels (which work in whole vectors) leave over. Lengths are checked by
// the exported callers.

func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpyGo(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

func scaleGo(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

func addGo(dst, x []float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += x[i]
	}
}

// mulScaleGo sets out[i] = x[i]·s·w[i].
func mulScaleGo(out, x, w []float32, s float32) {
	x = x[:len(out)]
	w = w[:len(out)]
	for i := range out {
		out[i] = x[i] * s * w[i]
	}
}

func siluMulGo(out, gate, up []float32) {
	gate = gate[:len(out)]
	up = up[:len(out)]
	for i := range out {
		g := gate[i]
		out[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

// expSubSumGo sets x[i] = exp(x[i]-m) and returns the sum of the results.
func expSubSumGo(x []float32, m float32) float32 {
	var sum float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		sum += e
	}
	return sum
}

// maxGo returns the largest non-NaN element of x, or -Inf if there is none.
func maxGo(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return m
}

// indexGo returns the first i with x[i] == v, or -1.
func indexGo(x []float32, v float32) int {
	for i, e := range x {
		if e == v {
			return i
		}
	}
	return -1
}

// dotTileGo sets out[i*4+j] = Σ_kk x[i*ldx+kk]·w[j*ldw+kk] for i < rows
// (at most 2) and j < 4: the dot products of rows x rows with 4 w rows.
func dotTileGo(rows, k int, x []float32, ldx int, w []float32, ldw int, out *[8]float32) {
	for i := range rows {
		xi := x[i*ldx : i*ldx+k]
		for j := range 4 {
			out[i*4+j] = dotGo(xi, w[j*ldw:j*ldw+k])
		}
	}
}
