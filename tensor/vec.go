package tensor

import (
	"fmt"
	"math"
)

// Dot returns Σ a[i]·b[i], accumulated in float32. len(a) must equal len(b).
func Dot(a, b []float32) float32 {
	if len(a) != len(b) {
		panic(fmt.Sprintf("tensor.Dot: len(a)=%d != len(b)=%d", len(a), len(b)))
	}
	return dot(a, b)
}

// Axpy computes y[i] += alpha·x[i]. len(x) must equal len(y); x and y may be
// the same slice but must not otherwise overlap.
func Axpy(alpha float32, x, y []float32) {
	if len(x) != len(y) {
		panic(fmt.Sprintf("tensor.Axpy: len(x)=%d != len(y)=%d", len(x), len(y)))
	}
	axpy(alpha, x, y)
}

// Scale computes x[i] *= alpha in place.
func Scale(alpha float32, x []float32) {
	scale(alpha, x)
}

// Add computes dst[i] += x[i]. len(x) must equal len(dst); dst and x may be
// the same slice but must not otherwise overlap.
func Add(dst, x []float32) {
	if len(x) != len(dst) {
		panic(fmt.Sprintf("tensor.Add: len(x)=%d != len(dst)=%d", len(x), len(dst)))
	}
	add(dst, x)
}

// RMSNorm normalises one row: out[i] = x[i] / sqrt(mean(x²) + eps) · w[i].
// out, x and w must have the same length; out may be the same slice as x
// (in-place) but must not otherwise overlap it. The sum of squares is
// accumulated in float32 and the scale computed in float64.
func RMSNorm(out, x, w []float32, eps float32) {
	if len(x) != len(w) || len(out) != len(x) {
		panic(fmt.Sprintf("tensor.RMSNorm: len(out)=%d len(x)=%d len(w)=%d, want all equal", len(out), len(x), len(w)))
	}
	if len(x) == 0 {
		return
	}
	ss := dot(x, x)
	s := float32(1 / math.Sqrt(float64(ss)/float64(len(x))+float64(eps)))
	mulScale(out, x, w, s)
}

// SiLUMul computes the SwiGLU gate: out[i] = gate[i]·sigmoid(gate[i])·up[i].
// All three slices must have the same length; out may be the same slice as
// gate or up but must not otherwise overlap them.
func SiLUMul(out, gate, up []float32) {
	if len(gate) != len(up) || len(out) != len(gate) {
		panic(fmt.Sprintf("tensor.SiLUMul: len(out)=%d len(gate)=%d len(up)=%d, want all equal", len(out), len(gate), len(up)))
	}
	siluMul(out, gate, up)
}

// MaxIndex returns the index of the largest element of x, the lowest such
// index on ties. NaNs are never chosen unless every element is NaN, in
// which case it returns 0. It panics on an empty x.
func MaxIndex(x []float32) int {
	if len(x) == 0 {
		panic("tensor.MaxIndex: empty slice")
	}
	if i := indexOf(x, maxOf(x)); i >= 0 {
		return i
	}
	return 0
}

// ScaleMax multiplies x by alpha in place and returns the largest
// result (NaNs ignored; −Inf for an empty x or one of NaNs only): the
// scaling and the running maximum of a tile of attention scores, in
// vector kernels.
func ScaleMax(alpha float32, x []float32) float32 {
	if len(x) == 0 {
		return float32(math.Inf(-1))
	}
	scale(alpha, x)
	return maxOf(x)
}

// ExpSub replaces x[i] with exp(x[i]-m) and returns their sum: the inner
// step of a softmax or an online softmax, where m is at least max(x) so no
// term overflows. It allocates nothing.
func ExpSub(x []float32, m float32) float32 {
	if len(x) == 0 {
		return 0
	}
	return expSubSum(x, m)
}
