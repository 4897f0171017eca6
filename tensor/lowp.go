package tensor

import (
	"math"
	"sync"
)

// Products against BF16, F16 and Q8_0 weights (see MatMulW). Decode-sized
// m reads w once, in its stored format, by the kernels of lowp_amd64.s or
// the portable ones at the end of this file; larger m widen panels of w
// to float32 for the packed GEMM (gemmW).

// lowpRows is how many rows of w one kernel call takes: enough to amortise
// the call, few enough that they stay in L2 while m > 1 rows of x pass.
const lowpRows = 8

// halfRowKMax is the longest k for which the half-precision m = 1 kernel
// takes one row of w at a time. Beyond it x (4k bytes) and a row of w
// (2k bytes) no longer share L1, x is re-read from L2 for every row, and
// taking four rows per pass over x reads w faster (on Zen 4 with 2
// threads, k = 8192: 31 GB/s against 22), though at k <= 4096 one
// sequential stream per worker is faster (k = 2048: 33 GB/s against 28).
const halfRowKMax = 4096

// gemvHalf serves BF16 and F16 weights for m <= gemvMaxM. F16 products of
// m > 1 rows run gemvF16Quads where the CPU has the AVX-512 quad kernel
// (k >= 16, n >= 4). BF16 products
// take x rounded to bfloat16: for m > 1 in pairs through gemvPairs where
// the CPU has AVX-512 BF16 (k even, k >= 32, n >= 4), else as floats
// through gemvWidened. One row stays on gemvWidened's one sequential
// stream of w per worker: a pair tile over four rows of w at a time
// (tried) read the random 1B checkpoint's memory-mapped BF16 weights
// slower in its place (gearbox generate's batch-1 decode, four
// alternations: 11.3–13.3 tok/s against 12.6–17.5), though faster on
// weights in the heap (BenchmarkMatMulWDecode).
func gemvHalf(y, x []float32, w *Weights, m int, acc bool) gemvWork {
	if w.dtype == F16 && m > 1 && w.k >= 16 && w.n >= 4 {
		if dots := f16QuadDots(); dots != nil {
			return gemvF16Quads(y, x, w, m, acc, dots)
		}
	}
	if w.dtype != BF16 {
		return gemvWidened(y, x, w, m, acc)
	}
	if dots := pairDots(); dots != nil && m > 1 && w.k%2 == 0 && w.k >= 32 && w.n >= 4 {
		return gemvPairs(y, x, w, m, acc, dots)
	}
	xr := roundedBF16(x)
	wk := gemvWidened(y, *xr, w, m, acc)
	free := wk.free
	wk.free = func() {
		if free != nil {
			free()
		}
		putScratch(xr)
	}
	return wk
}

// f16QuadFunc adds to out[(4q+i)·4+j], for q < quads and i, j < 4, the
// dot product over k elements (k%16 == 0) of x row 4q+i (row stride ldx)
// with binary16 w row j (row stride ldw), widened as it loads: the kernel
// of gemvF16Quads (dotQuadsF16AVX512).
type f16QuadFunc func(k int, x []float32, ldx, quads int, w []uint16, ldw int, out []float32)

// f16KB is gemvF16Quads' k block: four rows of w of that length (16 KiB)
// stay in L1 while the quads of x rows pass over them.
const f16KB = 2048

// gemvF16Quads serves F16 products of 2 <= m <= gemvMaxM rows (k >= 16,
// n >= 4) where the AVX-512 quad kernel runs: x rows (copied with zero
// rows up to a multiple of four when m is not one) against groups of four
// rows of w, widened in registers, f16KB columns at a time; the columns
// past a multiple of 16 are summed in Go, and the last group of an n not
// a multiple of four is the last four rows, of which only the new ones
// are stored. Before it, gemvWidened widened w into an L1 buffer first,
// which cost more than the products at these m (m = 4 ran at 0.6× the
// float32 GEMV's rate, on half the bytes).
func gemvF16Quads(y, x []float32, w *Weights, m int, acc bool, dots f16QuadFunc) gemvWork {
	n, k := w.n, w.k
	mq := (m + 3) &^ 3
	xs := x
	var xb *[]float32
	if mq != m {
		xb = getScratch(mq * k)
		copy(*xb, x)
		clear((*xb)[m*k:])
		xs = *xb
	}
	k16 := k &^ 15
	return gemvWork{units: (n + 3) / 4, run: func(lo, hi int) {
		quadGEMV(y, n, m, mq, acc, lo, hi, func(j0 int, s []float32) {
			for kb := 0; kb < k16; kb += f16KB {
				dots(min(f16KB, k16-kb), xs[kb:], k, mq/4, w.half[j0*k+kb:], k, s)
			}
		}, func(i, j0 int, s []float32) {
			for c := range 4 {
				row := w.half[(j0+c)*k : (j0+c+1)*k]
				for kk := k16; kk < k; kk++ {
					s[i*4+c] += x[i*k+kk] * FromF16(row[kk])
				}
			}
		})
	}, free: func() {
		if xb != nil {
			putScratch(xb)
		}
	}}
}

// gemvWidened is gemvHalf widening w to float32 (x rounded already for
// BF16). For m == 1 each worker streams its rows of w through the
// widening dot kernel (for BF16 under AVX-512 against x split into even
// and odd elements, see splitX). For m > 1 it widens four rows at a time,
// gemvKB columns at a time, into an L1 buffer and runs the float32 dot
// tiles of gemv over it, so each weight is widened once per call.
func gemvWidened(y, x []float32, w *Weights, m int, acc bool) gemvWork {
	n, k := w.n, w.k
	if m == 1 {
		buf := xScratch.Get().(*[]float32)
		xeo := splitX(w.dtype, x, buf)
		return gemvWork{units: n, run: func(lo, hi int) {
			var out [lowpRows]float32
			for j := lo; j < hi; j += lowpRows {
				r := min(lowpRows, hi-j)
				dotRowsHalf(w.dtype, x, xeo, w.half[j*k:(j+r)*k], k, k, out[:r])
				putRow(y[j:j+r], out[:r], acc)
			}
		}, free: func() { xScratch.Put(buf) }}
	}
	return gemvWork{units: (n + 3) / 4, run: func(lo, hi int) {
		var buf [4 * gemvKB]float32
		var sum [gemvMaxM * 4]float32
		for j := lo * 4; j < min(hi*4, n); j += 4 {
			rows := min(4, n-j)
			clear(sum[:m*4])
			for k0 := 0; k0 < k; k0 += gemvKB {
				kc := min(gemvKB, k-k0)
				for c := range rows {
					w.decodeRow(buf[c*kc:(c+1)*kc], j+c, k0)
				}
				clear(buf[rows*kc : 4*kc])
				dotRows(m, kc, x[k0:], k, buf[:4*kc], kc, sum[:m*4])
			}
			for i := range m {
				for c := range rows {
					put(y, i*n+j+c, sum[i*4+c], acc)
				}
			}
		}
	}}
}

// scratch recycles float32 buffers (GEMM packing, rounded inputs) between
// calls and goroutines. A buffer too small for a request grows in place,
// so a pool that serves several sizes ends up holding the largest rather
// than allocating whenever a smaller one comes out first (each decode
// step rounds inputs of 2,048 and 8,192 floats).
var scratch = sync.Pool{New: func() any { return new([]float32) }}

func getScratch(n int) *[]float32 {
	b := scratch.Get().(*[]float32)
	if cap(*b) < n {
		*b = make([]float32, n)
	}
	*b = (*b)[:n]
	return b
}

func putScratch(b *[]float32) { scratch.Put(b) }

// roundedBF16 returns x rounded to bfloat16 (ties to even, as ToBF16) in
// a scratch that the caller returns with putScratch: the input of every
// product against BF16 weights (see MatMulW).
func roundedBF16(x []float32) *[]float32 {
	b := getScratch(len(x))
	for i, v := range x {
		(*b)[i] = math.Float32frombits(uint32(ToBF16(v)) << 16)
	}
	return b
}

// xScratch recycles the buffers of splitX.
var xScratch = sync.Pool{New: func() any { return new([]float32) }}

// putRow stores (or with acc adds) src into dst.
func putRow(dst, src []float32, acc bool) {
	if acc {
		add(dst, src)
	} else {
		copy(dst, src)
	}
}

// q8Act holds rows of x quantized for the Q8_0 kernels, nbA blocks a
// row (the weights' nb rounded up to whole groups, so the VNNI kernel may
// read a group's worth for the last one): quants q (row i at
// q[i·nbA·32:], padded with zeros), scales d, and for the VNNI kernel
// c[i·nbA+b] = -16·Σ q over block b: each of the block's 8 int32 lanes
// starts from it, so that together they cancel the 128·Σ q that the +128
// in the stored weights adds.
type q8Act struct {
	q []int8
	c []int32
	d []float32
}

var q8ActPool sync.Pool

// getQ8Act returns a q8Act for m rows of nbA blocks.
func getQ8Act(m, nbA int) *q8Act {
	a, _ := q8ActPool.Get().(*q8Act)
	if a == nil {
		a = new(q8Act)
	}
	if cap(a.q) < m*nbA*Q8Block {
		a.q = make([]int8, m*nbA*Q8Block)
		a.c = make([]int32, m*nbA)
		a.d = make([]float32, m*nbA)
	}
	a.q, a.c, a.d = a.q[:m*nbA*Q8Block], a.c[:m*nbA], a.d[:m*nbA]
	return a
}

// q8ActBlocks returns the blocks of a q8Act row for weights of nb blocks.
func q8ActBlocks(nb int) int { return (nb + q8Group - 1) / q8Group * q8Group }

// quantizeActGo is the portable quantizeAct.
func quantizeActGo(q []int8, c []int32, d []float32, x []float32) {
	for b := range d {
		lo := min(b*Q8Block, len(x))
		xs := x[lo:min(lo+Q8Block, len(x))]
		qb := (*[Q8Block]int8)(q[b*Q8Block:])
		var amax float32
		for _, v := range xs {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		if amax == 0 {
			*qb = [Q8Block]int8{}
			d[b] = 0
		} else {
			d[b] = amax / 127
			inv := 127 / amax
			for i, v := range xs {
				qb[i] = int8(max(-127, min(127, roundEven(float32(v*inv)))))
			}
			for i := len(xs); i < Q8Block; i++ {
				qb[i] = 0
			}
		}
		var s int32
		for _, v := range qb {
			s += int32(v)
		}
		c[b] = -16 * s
	}
}

// gemvQ8 serves Q8_0 weights for m <= gemvMaxM: it quantizes the rows of
// x, then each worker streams its rows of w lowpRows at a time, taking the
// dot products of those rows with every row of x while they sit in L1.
func gemvQ8(y, x []float32, w *Weights, m int, acc bool) gemvWork {
	n, k, nb := w.n, w.k, w.nb
	nbA, rb := q8ActBlocks(nb), q8RowBytes(nb)
	a := getQ8Act(m, nbA)
	for i := range m {
		quantizeAct(a.q[i*nbA*Q8Block:(i+1)*nbA*Q8Block], a.c[i*nbA:(i+1)*nbA], a.d[i*nbA:(i+1)*nbA], x[i*k:(i+1)*k])
	}
	return gemvWork{units: n, run: func(lo, hi int) {
		var out [lowpRows]float32
		for j := lo; j < hi; j += lowpRows {
			r := min(lowpRows, hi-j)
			wq := w.q[j*rb : (j+r)*rb]
			for i := range m {
				dotRowsQ8(a, i, nb, nbA, wq, out[:r])
				putRow(y[i*n+j:i*n+j+r], out[:r], acc)
			}
		}
	}, free: func() { q8ActPool.Put(a) }}
}

// dotRowsHalfGo sets out[r] = Σ_{kk<k} x[kk]·widen(w[r·ldw+kk]) for the
// BF16 or F16 rows of w.
func dotRowsHalfGo(dt DType, x []float32, w []uint16, k, ldw int, out []float32) {
	var buf [256]float32
	for r := range out {
		row := w[r*ldw : r*ldw+k]
		var s float32
		for k0 := 0; k0 < k; k0 += len(buf) {
			c := min(len(buf), k-k0)
			if dt == BF16 {
				decodeBF16Go(buf[:c], row[k0:k0+c])
			} else {
				decodeF16Go(buf[:c], row[k0:k0+c])
			}
			s += dotGo(x[k0:k0+c], buf[:c])
		}
		out[r] = s
	}
}

// dotQ8Go returns Σ_b d_w[b]·d_x[b]·Σ_i w[b][i]·xq[32b+i] over the nb
// blocks of the Q8_0 row, each block's integer sum exact.
func dotQ8Go(xq []int8, xd []float32, row []uint8, nb int) float32 {
	var s float32
	for b := range nb {
		_, qo := q8Pos(b)
		xb := (*[Q8Block]int8)(xq[b*Q8Block:])
		wb := (*[Q8Block]uint8)(row[qo:])
		var t int32
		for i := range Q8Block {
			t += int32(xb[i]) * (int32(wb[i]) - 128)
		}
		s += float32(t) * float32(q8Scale(row, b)*xd[b])
	}
	return s
}

// dotRowsQ8Go sets out[r] to the dot product of quantized row i of a (rows
// of nbA blocks) with row r of the Q8_0 rows wq (nb blocks each).
func dotRowsQ8Go(a *q8Act, i, nb, nbA int, wq []uint8, out []float32) {
	xq := a.q[i*nbA*Q8Block : (i+1)*nbA*Q8Block]
	xd := a.d[i*nbA : (i+1)*nbA]
	rb := q8RowBytes(nb)
	for r := range out {
		out[r] = dotQ8Go(xq, xd, wq[r*rb:(r+1)*rb], nb)
	}
}
