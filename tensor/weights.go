package tensor

import (
	"fmt"
	"math"
)

// DType names the element format of a Weights matrix.
type DType uint8

const (
	// F32 holds float32 weights; products go through MatMul unchanged.
	F32 DType = iota
	// BF16 holds bfloat16 weights (see ToBF16); products take x rounded
	// to bfloat16 and accumulate in float32 (see MatMulW).
	BF16
	// F16 holds IEEE binary16 weights (see ToF16), widened likewise.
	F16
	// Q8_0 holds weights quantized in blocks of Q8Block along k, each
	// block 32 signed 8-bit integers in [-127, 127] and one binary16 scale
	// (the contents of llama.cpp's Q8_0; the layout is this package's own).
	// See QuantizeQ8_0 and MatMulW for how products are formed.
	Q8_0
)

// Q8Block is the number of weights that share one scale in Q8_0.
const Q8Block = 32

// String returns the format's lower-case name, as llama.cpp spells it.
func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	case Q8_0:
		return "q8_0"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Weights is an n×k weight matrix in nn.Linear layout ([out, in], row j
// holding the k weights of output j), stored in one of the DType formats
// and multiplied as such by MatMulW. BF16 and F16 matrices reference the
// caller's slice (it may be memory-mapped from a checkpoint) and must not
// be modified while in use; F32 likewise. A Weights is immutable once
// built and safe for concurrent use.
//
// Q8_0 layout: a row has nb = ⌈k/32⌉ blocks, rounded up to even (the
// AVX-512 kernel takes blocks in pairs), in groups of up to 32 blocks.
// A group is a 64-byte header of 32 little-endian binary16 scales (unused
// entries 0) followed by its blocks' quants, 32 bytes a block, each quant
// stored as quant+128 (so that the VNNI instruction can take the weights
// as its unsigned operand). Rows follow each other, q8RowBytes(nb) bytes
// apart: one sequential stream per row, 34 bytes per 32 weights in whole
// groups. Weights past k are quant 0 and blocks past ⌈k/32⌉ have scale 0.
type Weights struct {
	dtype DType
	n, k  int
	f32   []float32
	half  []uint16
	q     []uint8
	nb    int
}

// q8Group is the number of Q8_0 blocks that share one scale header.
const q8Group = 32

// q8Head is the size in bytes of a Q8_0 group's scale header.
const q8Head = 2 * q8Group

// q8RowBytes returns the size of a Q8_0 row of nb blocks.
func q8RowBytes(nb int) int { return (nb+q8Group-1)/q8Group*q8Head + nb*Q8Block }

// q8Pos returns the offsets within a Q8_0 row of block b's scale and of
// its first quant.
func q8Pos(b int) (scale, quants int) {
	g, i := b/q8Group, b%q8Group
	base := g * (q8Head + q8Group*Q8Block)
	return base + 2*i, base + q8Head + i*Q8Block
}

// q8Scale returns block b's scale in the Q8_0 row.
func q8Scale(row []uint8, b int) float32 {
	s, _ := q8Pos(b)
	return FromF16(uint16(row[s]) | uint16(row[s+1])<<8)
}

// NewWeightsF32 wraps w, an n×k float32 matrix (len(w) == n·k), without
// copying it.
func NewWeightsF32(w []float32, n, k int) *Weights {
	checkWeights("tensor.NewWeightsF32", len(w), n, k)
	return &Weights{dtype: F32, n: n, k: k, f32: w}
}

// NewWeightsBF16 wraps w, an n×k bfloat16 matrix (len(w) == n·k), without
// copying it.
func NewWeightsBF16(w []uint16, n, k int) *Weights {
	checkWeights("tensor.NewWeightsBF16", len(w), n, k)
	return &Weights{dtype: BF16, n: n, k: k, half: w}
}

// NewWeightsF16 wraps w, an n×k binary16 matrix (len(w) == n·k), without
// copying it.
func NewWeightsF16(w []uint16, n, k int) *Weights {
	checkWeights("tensor.NewWeightsF16", len(w), n, k)
	return &Weights{dtype: F16, n: n, k: k, half: w}
}

func checkWeights(name string, l, n, k int) {
	if n < 0 || k < 0 || l != n*k {
		panic(fmt.Sprintf("%s: len(w)=%d want n*k with n=%d k=%d", name, l, n, k))
	}
}

// q8Blocks returns the number of Q8_0 blocks per row for k columns:
// ⌈k/32⌉ rounded up to even.
func q8Blocks(k int) int { return (k + 2*Q8Block - 1) / (2 * Q8Block) * 2 }

// QuantizeQ8_0 returns w quantized to Q8_0, its rows split over the pool
// p. Each block of 32 weights gets the scale d = max|w|/127 rounded up to
// the next binary16 (so no quant exceeds 127; the largest finite binary16
// when max|w|/127 exceeds it, and then quants saturate) and quants
// round(w/d), ties to even, so every weight is within d/2 (plus one part
// in 10⁵ of d for float32 rounding) of its dequantized value. w must be
// finite. A Q8_0 w is returned as is.
func QuantizeQ8_0(p *Pool, w *Weights) *Weights {
	if w.dtype == Q8_0 {
		return w
	}
	nb := q8Blocks(w.k)
	rb := q8RowBytes(nb)
	out := &Weights{dtype: Q8_0, n: w.n, k: w.k, nb: nb, q: makeResident[uint8](w.n * rb)}
	p.Run(w.n, func(lo, hi int) {
		var row []float32
		if w.dtype != F32 {
			row = make([]float32, w.k)
		}
		for j := lo; j < hi; j++ {
			src := row
			if w.dtype == F32 {
				src = w.f32[j*w.k : (j+1)*w.k]
			} else {
				w.decodeRow(src, j, 0)
			}
			quantizeQ8Row(out.q[j*rb:(j+1)*rb], nb, src)
		}
	})
	return out
}

// quantizeQ8RowGo is quantizeQ8Row for blocks [b0, nb).
func quantizeQ8RowGo(row []uint8, nb int, src []float32, b0 int) {
	for b := b0; b < nb; b++ {
		lo := min(b*Q8Block, len(src))
		xs := src[lo:min(lo+Q8Block, len(src))]
		so, qo := q8Pos(b)
		qb := row[qo : qo+Q8Block]
		var amax float32
		for _, v := range xs {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		h := ToF16(amax / 127)
		if h >= 0x7c00 {
			h = 0x7bff // saturate at the largest finite binary16
		} else if FromF16(h) < amax/127 {
			h++ // round the scale up, so |w/d| <= 127
		}
		row[so], row[so+1] = uint8(h), uint8(h>>8)
		scale := FromF16(h)
		if scale == 0 {
			for i := range qb {
				qb[i] = 128
			}
			continue
		}
		inv := 1 / scale
		for i := range qb {
			var v float32
			if i < len(xs) {
				v = xs[i]
			}
			r := max(-127, min(127, roundEven(float32(v*inv))))
			qb[i] = uint8(int32(r) + 128)
		}
	}
}

// roundEven rounds f to an integer, ties to even, for |f| < 2²²: adding
// and subtracting 1.5·2²³ leaves the integer part in float32's ulp.
func roundEven(f float32) float32 {
	const magic = 12582912 // 1.5·2²³
	if f >= 0 {
		return float32(f+magic) - magic
	}
	return -(float32(-f+magic) - magic)
}

// DType reports the element format of w.
func (w *Weights) DType() DType { return w.dtype }

// Shape returns w's n (rows, outputs) and k (columns, inputs).
func (w *Weights) Shape() (n, k int) { return w.n, w.k }

// Bytes returns the size of w's stored data: what one product at m = 1
// reads from memory.
func (w *Weights) Bytes() int {
	switch w.dtype {
	case F32:
		return 4 * len(w.f32)
	case BF16, F16:
		return 2 * len(w.half)
	}
	return len(w.q)
}

// Row writes row j of w, widened or dequantized to float32 exactly as the
// kernels see it, into dst (len(dst) == k). It serves embedding lookups
// and tests.
func (w *Weights) Row(j int, dst []float32) {
	if j < 0 || j >= w.n || len(dst) != w.k {
		panic(fmt.Sprintf("tensor.Weights.Row: row %d of %d, len(dst)=%d want %d", j, w.n, len(dst), w.k))
	}
	w.decodeRow(dst, j, 0)
}

// decodeRow writes columns [c0, c0+len(dst)) of row j as float32.
func (w *Weights) decodeRow(dst []float32, j, c0 int) {
	off := j*w.k + c0
	switch w.dtype {
	case F32:
		copy(dst, w.f32[off:off+len(dst)])
	case BF16:
		decodeBF16(dst, w.half[off:off+len(dst)])
	case F16:
		decodeF16(dst, w.half[off:off+len(dst)])
	case Q8_0:
		rb := q8RowBytes(w.nb)
		row := w.q[j*rb : (j+1)*rb]
		for len(dst) > 0 {
			b, i := c0/Q8Block, c0%Q8Block
			c := min(len(dst), Q8Block-i)
			_, qo := q8Pos(b)
			dequantQ8(dst[:c], row[qo+i:qo+i+c], q8Scale(row, b))
			dst, c0 = dst[c:], c0+c
		}
	}
}

// dequantQ8Go sets dst[i] = (q[i]-128)·scale, exactly.
func dequantQ8Go(dst []float32, q []uint8, scale float32) {
	q = q[:len(dst)]
	for i := range dst {
		dst[i] = float32(int32(q[i])-128) * scale
	}
}

// MatMulW computes y = x·wᵀ for x [m×k] and y [m×n], with n×k = w.Shape(),
// as MatMul does for float32 weights (same pool splitting over w's rows,
// same overwrite and aliasing rules), reading w in its stored format:
//
//   - F32: MatMul itself.
//   - BF16: each element of x is first rounded to bfloat16 (ties to even,
//     as ToBF16), so every product of a weight and an input is exact in
//     float32; products accumulate in float32, and the result is that of
//     MatMul of the rounded x by the widened matrix up to float32
//     summation order. This is the rule of llama.cpp's BF16 CPU path and
//     of a bfloat16 GEMM on a GPU, and what lets larger m multiply
//     bfloat16 pairs in hardware: where the CPU has AVX-512 BF16
//     (VDPBF16PS, twice the float32 FMA's rate), m > 32 run gemmBF16 and
//     smaller m the pair dot tiles of gemvPairs, w streamed once; the
//     instruction counts denormal inputs and weights (below 2^-126) as
//     zero. Load a checkpoint as float32 to keep x unrounded.
//   - F16: each weight is widened to float32 and products accumulate in
//     float32, so the result is that of MatMul on the widened matrix up
//     to float32 summation order.
//   - BF16 and F16 without the pair kernel: for m <= 32 w is streamed
//     once per call and widened in registers; larger m widen panels of w
//     into the packed float32 GEMM.
//   - Q8_0: for m <= 32 (decode) each row of x is quantized per block of
//     32 to 8-bit integers with its own float32 scale max|x|/127 (ties to
//     even), and each block's dot product is exact in int32 before it is
//     scaled and accumulated in float32; the only error beyond float32
//     rounding is the activation rounding, at most half a step of x's
//     block scale per element. Larger m (prefill) do the same in tiles of
//     rows of x by rows of w (see gemmQ8) where the CPU has AVX-512 VNNI,
//     or the assembly kernels are off; on other amd64 CPUs they
//     dequantize panels of w into the packed float32 GEMM, with x
//     unquantized.
func MatMulW(p *Pool, y, x []float32, w *Weights, m int) {
	checkMatMulW("tensor.MatMulW", y, x, w, m)
	matmulW(p, y, x, w, m, false)
}

// MatMulWAcc computes y += x·wᵀ with the shapes and rules of MatMulW.
func MatMulWAcc(p *Pool, y, x []float32, w *Weights, m int) {
	checkMatMulW("tensor.MatMulWAcc", y, x, w, m)
	matmulW(p, y, x, w, m, true)
}

// Projection is one product of MatMulWs: Y = x·Wᵀ.
type Projection struct {
	Y []float32
	W *Weights
}

// MatMulWs computes every projection's Y = x·Wᵀ, all of the same x [m×k],
// with the shapes and rules of MatMulW and the same values. For
// decode-sized m (up to 32 rows) the rows of all the weights are split
// over the pool as one job, so projections of one input (a layer's q, k
// and v, or gate and up) meet the pool once instead of once each: on 2
// threads each meeting costs the slower thread's lead. Larger m runs them
// one after another.
func MatMulWs(p *Pool, x []float32, m int, ps ...Projection) {
	for _, pr := range ps {
		checkMatMulW("tensor.MatMulWs", pr.Y, x, pr.W, m)
	}
	fuse := m >= 1 && m <= gemvMaxM && len(ps) > 1
	for _, pr := range ps {
		fuse = fuse && pr.W.k > 0 && pr.W.n > 0
	}
	if !fuse {
		for _, pr := range ps {
			matmulW(p, pr.Y, x, pr.W, m, false)
		}
		return
	}
	var buf [4]gemvWork
	works, total := buf[:0], 0
	for _, pr := range ps {
		wk := gemvW(pr.Y, x, pr.W, m, false)
		works = append(works, wk)
		total += wk.units
	}
	p.Run(total, func(lo, hi int) {
		base := 0
		for _, wk := range works {
			if a, b := max(lo-base, 0), min(hi-base, wk.units); a < b {
				wk.run(a, b)
			}
			base += wk.units
		}
	})
	for _, wk := range works {
		if wk.free != nil {
			wk.free()
		}
	}
}

// gemvW lays out y (+)= x·wᵀ for m <= gemvMaxM in w's stored format.
func gemvW(y, x []float32, w *Weights, m int, acc bool) gemvWork {
	switch w.dtype {
	case F32:
		return gemv(y, x, w.f32, m, w.k, w.n, acc)
	case Q8_0:
		return gemvQ8(y, x, w, m, acc)
	default:
		return gemvHalf(y, x, w, m, acc)
	}
}

func checkMatMulW(name string, y, x []float32, w *Weights, m int) {
	switch {
	case m < 0:
		panic(fmt.Sprintf("%s: negative m=%d", name, m))
	case len(x) != m*w.k:
		panic(fmt.Sprintf("%s: len(x)=%d want m*k=%d", name, len(x), m*w.k))
	case len(y) != m*w.n:
		panic(fmt.Sprintf("%s: len(y)=%d want m*n=%d", name, len(y), m*w.n))
	}
}

func matmulW(p *Pool, y, x []float32, w *Weights, m int, acc bool) {
	n, k := w.n, w.k
	if w.dtype == BF16 && m > gemvMaxM && n > 0 && k > 0 { // smaller m: gemvHalf rounds x
		if kern := bf16Kernel(); kern != nil {
			gemmBF16(p, y, x, w, m, acc, kern)
			return
		}
		xr := roundedBF16(x)
		defer putScratch(xr)
		x = *xr
	}
	switch {
	case w.dtype == F32:
		matmul(p, y, x, w.f32, m, k, n, acc)
	case m == 0 || n == 0:
	case k == 0:
		if !acc {
			clear(y)
		}
	case m <= gemvMaxM:
		gemvW(y, x, w, m, acc).do(p)
	case w.dtype == Q8_0 && q8Tile() != nil:
		gemmQ8(p, y, x, w, m, acc, q8Tile())
	default:
		gemmW(p, y, x, w, m, acc)
	}
}
