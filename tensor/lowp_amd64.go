//go:build amd64 && !noasm

package tensor

import "golang.org/x/sys/cpu"

// f16cAvailable reports whether the F16 kernels can run (they widen with
// F16C's VCVTPH2PS); the BF16 kernels need only AVX2.
var f16cAvailable = asmAvailable && cpu.X86.HasF16C

// vnniAvailable reports whether the AVX-512 VNNI Q8_0 kernel can run.
var vnniAvailable = avx512Available && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI

// bwAvailable reports whether decodeBF16AVX512 can run: its 16-bit to
// 32-bit VPMOVZXWD on 512-bit registers is AVX-512 BW.
var bwAvailable = avx512Available && cpu.X86.HasAVX512BW

// Assembly kernels of the low-precision products (lowp_amd64.s).

// dotRowsBF16AVX2 sets out[r] = Σ_{kk<k} x[kk]·bf16(w[r·ldw+kk]) for
// r < rows. k%8 == 0, k > 0, rows > 0.
//
//go:noescape
func dotRowsBF16AVX2(x *float32, w *uint16, k, ldw, rows int, out *float32)

// dotRowsF16AVX2 is dotRowsBF16AVX2 for binary16 weights.
//
//go:noescape
func dotRowsF16AVX2(x *float32, w *uint16, k, ldw, rows int, out *float32)

// dotRowsF16AVX512 is dotRowsF16AVX2 in 16-lane vectors, 32 weights (one
// 64-byte load) a step; k%32 == 0.
//
//go:noescape
func dotRowsF16AVX512(x *float32, w *uint16, k, ldw, rows int, out *float32)

// dot4RowsF16AVX512 is dotRowsF16AVX512 four rows at a time, each x vector
// loaded once for the four: quads·4 rows; k%32 == 0.
//
//go:noescape
func dot4RowsF16AVX512(x *float32, w *uint16, k, ldw, quads int, out *float32)

// splitEvenOddAVX512 splits each of chunks 32-float chunks of src into
// its 16 even-indexed then its 16 odd-indexed elements in dst.
//
//go:noescape
func splitEvenOddAVX512(dst, src *float32, chunks int)

// dotRowsBF16EOAVX512 is dotRowsBF16AVX2 in 16-lane vectors against x
// split by splitEvenOddAVX512, which lets it widen 32 weights with one
// 64-byte load, a shift and a mask; k%32 == 0, k > 0.
//
//go:noescape
func dotRowsBF16EOAVX512(xeo *float32, w *uint16, k, ldw, rows int, out *float32)

// dot4RowsBF16EOAVX512 is dotRowsBF16EOAVX512 four rows at a time, as
// dot4RowsF16AVX512.
//
//go:noescape
func dot4RowsBF16EOAVX512(xeo *float32, w *uint16, k, ldw, quads int, out *float32)

// decodeBF16AVX2 widens n bfloat16 to float32; n%8 == 0, n > 0.
//
//go:noescape
func decodeBF16AVX2(dst *float32, src *uint16, n int)

// decodeBF16AVX512 widens n bfloat16 to float32; n%16 == 0, n > 0; it
// needs AVX-512 BW (bwAvailable).
//
//go:noescape
func decodeBF16AVX512(dst *float32, src *uint16, n int)

// decodeF16AVX512 widens n binary16 to float32; n%16 == 0, n > 0.
//
//go:noescape
func decodeF16AVX512(dst *float32, src *uint16, n int)

// decodeF16AVX2 widens n binary16 to float32; n%8 == 0, n > 0.
//
//go:noescape
func decodeF16AVX2(dst *float32, src *uint16, n int)

// dequantQ8AVX2 sets dst[i] = (q[i]-128)·scale for i < n; n%8 == 0, n > 0.
//
//go:noescape
func dequantQ8AVX2(dst *float32, q *uint8, scale float32, n int)

// dotRowsQ8AVX2 sets out[r], r < rows, to the dot product of the quantized
// x row (xq, xd; nb blocks) with row r of the Q8_0 rows at w (nb blocks
// each), per block by VPMADDUBSW on |x| and w·sign(x); it needs F16C.
// nb > 0, rows > 0.
//
//go:noescape
func dotRowsQ8AVX2(xq *int8, xd *float32, w *uint8, nb, rows int, out *float32)

// dotRowsQ8VNNI is dotRowsQ8AVX2 by AVX-512 VNNI: VPDPBUSD of the stored
// (quant+128) weights with the x quants, each block's lanes started from
// its correction xc[b] (see q8Act). nb even, nb > 0, rows > 0.
//
//go:noescape
func dotRowsQ8VNNI(xq *int8, xc *int32, xd *float32, w *uint8, nb, rows int, out *float32)

func decodeBF16(dst []float32, src []uint16) {
	n := 0
	if useAsm {
		n = widenAsm(BF16, dst, src)
	}
	decodeBF16Go(dst[n:], src[n:])
}

func decodeF16(dst []float32, src []uint16) {
	n := 0
	if useAsm && f16cAvailable {
		n = widenAsm(F16, dst, src)
	}
	decodeF16Go(dst[n:], src[n:])
}

// widenAsm widens the leading whole vectors of src, BF16 or F16 (dt),
// into dst, 16 at a time where the AVX-512 kernels may run, then 8 at a
// time, and returns how many it widened.
func widenAsm(dt DType, dst []float32, src []uint16) int {
	n := 0
	if w := len(dst) &^ 15; useAVX512 && (dt == F16 || bwAvailable) && w > 0 {
		_ = src[w-1]
		if dt == BF16 {
			decodeBF16AVX512(&dst[0], &src[0], w)
		} else {
			decodeF16AVX512(&dst[0], &src[0], w)
		}
		n = w
	}
	if w := len(dst) &^ 7; w > n {
		_ = src[w-1]
		if dt == BF16 {
			decodeBF16AVX2(&dst[n], &src[n], w-n)
		} else {
			decodeF16AVX2(&dst[n], &src[n], w-n)
		}
		n = w
	}
	return n
}

func dequantQ8(dst []float32, q []uint8, scale float32) {
	n := len(dst) &^ 7
	if useAsm && n > 0 {
		_ = q[n-1]
		dequantQ8AVX2(&dst[0], &q[0], scale, n)
	} else {
		n = 0
	}
	dequantQ8Go(dst[n:], q[n:], scale)
}

// dotRowsHalf sets out[r] = Σ_{kk<k} x[kk]·widen(w[r·ldw+kk]) for the
// len(out) BF16 or F16 rows of w; xeo is splitX's form of x, or nil.
func dotRowsHalf(dt DType, x, xeo []float32, w []uint16, k, ldw int, out []float32) {
	rows := len(out)
	if !useAsm || k < 8 || dt == F16 && !f16cAvailable {
		dotRowsHalfGo(dt, x, w, k, ldw, out)
		return
	}
	_ = w[(rows-1)*ldw+k-1]
	_ = x[k-1]
	var kv int
	if useAVX512 && k >= 32 && (dt == F16 || xeo != nil) {
		kv = k &^ 31
		r := 0
		if k > halfRowKMax && rows >= 4 {
			r = rows &^ 3
			if dt == BF16 {
				dot4RowsBF16EOAVX512(&xeo[0], &w[0], kv, ldw, r/4, &out[0])
			} else {
				dot4RowsF16AVX512(&x[0], &w[0], kv, ldw, r/4, &out[0])
			}
		}
		if r < rows {
			if dt == BF16 {
				dotRowsBF16EOAVX512(&xeo[0], &w[r*ldw], kv, ldw, rows-r, &out[r])
			} else {
				dotRowsF16AVX512(&x[0], &w[r*ldw], kv, ldw, rows-r, &out[r])
			}
		}
	} else {
		kv = k &^ 7
		if dt == BF16 {
			dotRowsBF16AVX2(&x[0], &w[0], kv, ldw, rows, &out[0])
		} else {
			dotRowsF16AVX2(&x[0], &w[0], kv, ldw, rows, &out[0])
		}
	}
	if kv == k {
		return
	}
	var tail [32]float32
	for r := range out {
		t := tail[:k-kv]
		if dt == BF16 {
			decodeBF16Go(t, w[r*ldw+kv:r*ldw+k])
		} else {
			decodeF16Go(t, w[r*ldw+kv:r*ldw+k])
		}
		out[r] += dotGo(x[kv:k], t)
	}
}

// dotRowsQ8 sets out[r] to the dot product of quantized row i of a (rows
// of nbA blocks) with row r of the Q8_0 rows wq (nb blocks each).
func dotRowsQ8(a *q8Act, i, nb, nbA int, wq []uint8, out []float32) {
	rows := len(out)
	vnni := useAsm && useAVX512 && vnniAvailable
	if !vnni && !(useAsm && f16cAvailable) {
		dotRowsQ8Go(a, i, nb, nbA, wq, out)
		return
	}
	_ = wq[rows*q8RowBytes(nb)-1]
	_ = a.q[(i+1)*nbA*Q8Block-1]
	_ = a.c[(i+1)*nbA-1]
	_ = a.d[(i+1)*nbA-1]
	if vnni {
		dotRowsQ8VNNI(&a.q[i*nbA*Q8Block], &a.c[i*nbA], &a.d[i*nbA], &wq[0], nb, rows, &out[0])
		return
	}
	dotRowsQ8AVX2(&a.q[i*nbA*Q8Block], &a.d[i*nbA], &wq[0], nb, rows, &out[0])
}

// quantizeActAVX512 is quantizeAct for nb > 0 whole blocks of x.
//
//go:noescape
func quantizeActAVX512(q *int8, c *int32, d *float32, x *float32, nb int)

// quantizeAct quantizes x (len(x) <= len(d)·32) into blocks of 32 quants
// q with scales d = max|x|/127 and the corrections c, padding with zeros.
func quantizeAct(q []int8, c []int32, d []float32, x []float32) {
	nb := min(len(x)/Q8Block, len(d))
	if useAsm && useAVX512 && nb > 0 {
		_ = q[nb*Q8Block-1]
		_ = c[nb-1]
		quantizeActAVX512(&q[0], &c[0], &d[0], &x[0], nb)
	} else {
		nb = 0
	}
	quantizeActGo(q[nb*Q8Block:], c[nb:], d[nb:], x[nb*Q8Block:])
}

// evenOddIdx holds the VPERMI2PS indices of splitEvenOddAVX512.
//
//lint:ignore U1000 read only by lowp_amd64.s, which staticcheck cannot see
var evenOddIdx = func() (t [2][16]int32) {
	for i := range 16 {
		t[0][i], t[1][i] = int32(2*i), int32(2*i+1)
	}
	return t
}()

// splitX returns x prepared for dotRowsHalf: for BF16 under AVX-512, its
// whole 32-float chunks split into even and odd elements in *buf (grown as
// needed); otherwise nil.
func splitX(dt DType, x []float32, buf *[]float32) []float32 {
	k32 := len(x) &^ 31
	if dt != BF16 || !useAsm || !useAVX512 || k32 == 0 {
		return nil
	}
	if cap(*buf) < k32 {
		*buf = make([]float32, k32)
	}
	xeo := (*buf)[:k32]
	splitEvenOddAVX512(&xeo[0], &x[0], k32/32)
	return xeo
}

// quantizeQ8AVX512 is quantizeQ8Row for nb > 0 whole blocks of src within
// one group: scales to head, quants to quants.
//
//go:noescape
func quantizeQ8AVX512(head, quants *uint8, src *float32, nb int)

// quantizeQ8Row quantizes src into the Q8_0 row of nb blocks, whose bytes
// are zero, padding with zero quants and scales.
func quantizeQ8Row(row []uint8, nb int, src []float32) {
	full := 0
	if useAsm && useAVX512 {
		full = min(len(src)/Q8Block, nb)
		for b := 0; b < full; b += q8Group {
			c := min(q8Group, full-b)
			so, qo := q8Pos(b)
			_ = row[qo+c*Q8Block-1]
			quantizeQ8AVX512(&row[so], &row[qo], &src[b*Q8Block], c)
		}
	}
	quantizeQ8RowGo(row, nb, src, full)
}

// q8Perm holds the VPERMPS/VPERMD indices of the VNNI kernel: vector p
// spreads lane 2p of a 16-lane vector of per-block values over lanes 0-7
// and lane 2p+1 over lanes 8-15, the lanes of block pair p's dot products.
//
//lint:ignore U1000 read only by lowp_amd64.s, which staticcheck cannot see
var q8Perm = func() (t [8][16]int32) {
	for p := range t {
		for l := range t[p] {
			t[p][l] = int32(2*p + l/8)
		}
	}
	return t
}()

func f16QuadsAsm(k int, x []float32, ldx, quads int, w []uint16, ldw int, out []float32) {
	_ = x[(4*quads-1)*ldx+k-1]
	_ = w[3*ldw+k-1]
	_ = out[16*quads-1]
	dotQuadsF16AVX512(k, &x[0], ldx, quads, &w[0], ldw, &out[0])
}

// f16QuadDots returns the F16 quad kernel of gemvF16Quads where the CPU
// has AVX-512 and F16C, else nil.
func f16QuadDots() f16QuadFunc {
	if useAsm && useAVX512 && f16cAvailable {
		return f16QuadsAsm
	}
	return nil
}
