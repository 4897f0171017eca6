package tensor

import "fmt"

// Views, copies and conversions of Weights: what a model loader and a
// tensor-parallel shard need to cut and re-type weight matrices.

// NewWeights returns an n×k matrix of zeros stored as d. BF16, F16 and F32
// matrices may be filled through Half or F32 before they are first used;
// a Q8_0 one has every scale 0.
func NewWeights(d DType, n, k int) *Weights {
	checkWeights("tensor.NewWeights", n*k, n, k)
	switch d {
	case F32:
		return NewWeightsF32(make([]float32, n*k), n, k)
	case BF16:
		return NewWeightsBF16(make([]uint16, n*k), n, k)
	case F16:
		return NewWeightsF16(make([]uint16, n*k), n, k)
	case Q8_0:
		nb := q8Blocks(k)
		w := &Weights{dtype: Q8_0, n: n, k: k, nb: nb, q: make([]uint8, n*q8RowBytes(nb))}
		for j := range n {
			row := w.q[j*q8RowBytes(nb) : (j+1)*q8RowBytes(nb)]
			for b := range nb {
				_, qo := q8Pos(b)
				fill128(row[qo : qo+Q8Block])
			}
		}
		return w
	}
	panic(fmt.Sprintf("tensor.NewWeights: unknown dtype %v", d))
}

func fill128(b []uint8) {
	for i := range b {
		b[i] = 128
	}
}

// F32 returns the row-major storage of an F32 matrix (nil for the other
// formats). It aliases w: the caller may write it only before w is first
// used (to fill a matrix from NewWeights).
func (w *Weights) F32() []float32 { return w.f32 }

// Half returns the row-major bfloat16 or binary16 storage of a BF16 or F16
// matrix (nil for the other formats), with the aliasing rule of F32.
func (w *Weights) Half() []uint16 { return w.half }

// Segment writes columns [c0, c0+len(dst)) of row j of w, widened or
// dequantized to float32 as Row does, into dst.
func (w *Weights) Segment(j, c0 int, dst []float32) {
	if j < 0 || j >= w.n || c0 < 0 || c0+len(dst) > w.k {
		panic(fmt.Sprintf("tensor.Weights.Segment: row %d of %d, columns [%d, %d) of %d", j, w.n, c0, c0+len(dst), w.k))
	}
	w.decodeRow(dst, j, c0)
}

// Rows returns rows [lo, hi) of w as a view sharing w's storage (rows of
// every format are independent, Q8_0's included).
func (w *Weights) Rows(lo, hi int) *Weights {
	if lo < 0 || hi < lo || hi > w.n {
		panic(fmt.Sprintf("tensor.Weights.Rows: [%d, %d) of %d rows", lo, hi, w.n))
	}
	v := *w
	v.n = hi - lo
	switch w.dtype {
	case F32:
		v.f32 = w.f32[lo*w.k : hi*w.k : hi*w.k]
	case BF16, F16:
		v.half = w.half[lo*w.k : hi*w.k : hi*w.k]
	case Q8_0:
		rb := q8RowBytes(w.nb)
		v.q = w.q[lo*rb : hi*rb : hi*rb]
	}
	return &v
}

// Cols returns columns [lo, hi) of every row of w in w's format: w itself
// when that is every column, else a copy. F32, BF16 and F16 copy the
// stored values. A Q8_0 copy is exact (the same blocks, scales and
// quants) when lo is a multiple of Q8Block and hi is too or is k;
// otherwise the columns are dequantized and quantized again in blocks
// that start at lo, an extra rounding of at most half a step of the new
// block's scale per weight. The pool p (nil: inline) splits the rows.
func (w *Weights) Cols(p *Pool, lo, hi int) *Weights {
	if lo < 0 || hi < lo || hi > w.k {
		panic(fmt.Sprintf("tensor.Weights.Cols: [%d, %d) of %d columns", lo, hi, w.k))
	}
	if lo == 0 && hi == w.k {
		return w
	}
	n, k := w.n, hi-lo
	switch w.dtype {
	case F32:
		out := makeResident[float32](n * k)
		p.Run(n, func(a, b int) {
			for j := a; j < b; j++ {
				copy(out[j*k:(j+1)*k], w.f32[j*w.k+lo:j*w.k+hi])
			}
		})
		return NewWeightsF32(out, n, k)
	case BF16, F16:
		out := makeResident[uint16](n * k)
		p.Run(n, func(a, b int) {
			for j := a; j < b; j++ {
				copy(out[j*k:(j+1)*k], w.half[j*w.k+lo:j*w.k+hi])
			}
		})
		return &Weights{dtype: w.dtype, n: n, k: k, half: out}
	}
	nb := q8Blocks(k)
	rb, srb := q8RowBytes(nb), q8RowBytes(w.nb)
	out := &Weights{dtype: Q8_0, n: n, k: k, nb: nb, q: make([]uint8, n*rb)}
	aligned := lo%Q8Block == 0 && (hi%Q8Block == 0 || hi == w.k)
	p.Run(n, func(a, b int) {
		var buf []float32
		if !aligned {
			buf = make([]float32, k)
		}
		for j := a; j < b; j++ {
			dst := out.q[j*rb : (j+1)*rb]
			if !aligned {
				w.decodeRow(buf, j, lo)
				quantizeQ8Row(dst, nb, buf)
				continue
			}
			src := w.q[j*srb : (j+1)*srb]
			used := (k + Q8Block - 1) / Q8Block
			for c := range nb {
				so, qo := q8Pos(c)
				if c >= used {
					fill128(dst[qo : qo+Q8Block]) // padding block: scale 0, quants 0
					continue
				}
				ss, sq := q8Pos(lo/Q8Block + c)
				dst[so], dst[so+1] = src[ss], src[ss+1]
				copy(dst[qo:qo+Q8Block], src[sq:sq+Q8Block])
			}
		}
	})
	return out
}

// Convert returns w stored as d: w itself when it already is, else a new
// matrix. Widening to F32 and dequantizing are exact; narrowing to BF16 or
// F16 rounds to nearest, ties to even (from F16 or Q8_0 through the exact
// float32 values); Q8_0 is QuantizeQ8_0. The pool p (nil: inline) splits
// the rows.
func Convert(p *Pool, w *Weights, d DType) *Weights {
	if w.dtype == d {
		return w
	}
	n, k := w.n, w.k
	switch d {
	case Q8_0:
		return QuantizeQ8_0(p, w)
	case F32:
		out := makeResident[float32](n * k)
		p.Run(n, func(a, b int) {
			for j := a; j < b; j++ {
				w.decodeRow(out[j*k:(j+1)*k], j, 0)
			}
		})
		return NewWeightsF32(out, n, k)
	case BF16, F16:
		out := makeResident[uint16](n * k)
		p.Run(n, func(a, b int) {
			var row []float32
			if w.dtype != F32 {
				row = make([]float32, k)
			}
			for j := a; j < b; j++ {
				src := row
				if w.dtype == F32 {
					src = w.f32[j*k : (j+1)*k]
				} else {
					w.decodeRow(src, j, 0)
				}
				if d == BF16 {
					EncodeBF16(out[j*k:(j+1)*k], src)
				} else {
					EncodeF16(out[j*k:(j+1)*k], src)
				}
			}
		})
		return &Weights{dtype: d, n: n, k: k, half: out}
	}
	panic(fmt.Sprintf("tensor.Convert: unknown dtype %v", d))
}

// BytesFor returns the Bytes of an n×k matrix stored as d.
func BytesFor(d DType, n, k int) int {
	switch d {
	case F32:
		return 4 * n * k
	case BF16, F16:
		return 2 * n * k
	case Q8_0:
		return n * q8RowBytes(q8Blocks(k))
	}
	panic(fmt.Sprintf("tensor.BytesFor: unknown dtype %v", d))
}
