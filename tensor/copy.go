package tensor

import "fmt"

// CopyFrom copies src's stored data (its elements as stored: float32,
// 16-bit or Q8_0 blocks, bit-exact) into w, which must have src's format
// and shape, and returns the bytes copied. w must not be in use by a
// product meanwhile. It allocates nothing.
func (w *Weights) CopyFrom(src *Weights) int {
	if w.dtype != src.dtype || w.n != src.n || w.k != src.k || w.nb != src.nb {
		panic(fmt.Sprintf("tensor.Weights.CopyFrom: %v %d×%d from %v %d×%d", w.dtype, w.n, w.k, src.dtype, src.n, src.k))
	}
	switch w.dtype {
	case F32:
		return 4 * copy(w.f32, src.f32)
	case BF16, F16:
		return 2 * copy(w.half, src.half)
	}
	return copy(w.q, src.q)
}
