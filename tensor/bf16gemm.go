package tensor

import "sync"

// The bfloat16 GEMM: MatMulW's products against BF16 weights for m > 32
// where the CPU multiplies bfloat16 pairs (AVX-512 BF16's VDPBF16PS, at
// twice the float32 FMA's rate): x is rounded into pairs once per call,
// w is packed into pair panels slab by slab, and a 12×32 micro-kernel
// (bf16gemm_amd64.s) sums the pairs' products in float32.

// Blocking of the bfloat16 GEMM (gemmBF16). Operands are pairs of
// bfloat16 packed in a uint32 (the element of even index in the low
// half), so k runs in pairs: a slab of w is bfKP pairs (2,048 weights)
// deep and bfNC rows wide (1 MiB), and a bfNR-row panel of it (128 KiB,
// in L2) meets bfMC rows of x, bfMR at a time. Deep slabs write each tile
// of y once per 2,048 weights: on Zen 4 with 2 threads, 128 pairs deep
// ran 351–370 GFLOP/s at m = 512, 256 pairs 370–386, 1,024 382–402.
const (
	bfMR = 12   // micro-tile rows (rows of x)
	bfNR = 32   // micro-tile columns (rows of w): two 16-lane vectors
	bfKP = 1024 // pairs of k in one packed slab
	bfMC = 96   // x rows per pass over a panel; multiple of bfMR
	bfNC = 256  // w rows per packed slab; multiple of bfNR
)

var pairScratch = sync.Pool{New: func() any { return new([]uint32) }}

// getPairs returns a scratch of n pairs.
func getPairs(n int) *[]uint32 {
	b := pairScratch.Get().(*[]uint32)
	if cap(*b) < n {
		*b = make([]uint32, n)
	}
	*b = (*b)[:n]
	return b
}

// pairBF16 packs the bfloat16 roundings of lo and hi into one pair.
func pairBF16(lo, hi float32) uint32 {
	return uint32(ToBF16(lo)) | uint32(ToBF16(hi))<<16
}

// packPairs rounds the rows [i0, i1) of the m×k matrix x into dst, kp
// pairs a row; an odd k's last pair has a zero high half.
func packPairs(dst []uint32, x []float32, k, kp, i0, i1 int) {
	if k%2 == 0 { // rows are contiguous in both
		d, src := dst[i0*kp:i1*kp], x[i0*k:i1*k]
		done := pairsAsm(d, src)
		for kk := done; kk < len(d); kk++ {
			d[kk] = pairBF16(src[2*kk], src[2*kk+1])
		}
		return
	}
	for i := i0; i < i1; i++ {
		row := x[i*k : (i+1)*k]
		out := dst[i*kp : (i+1)*kp]
		for kk := range k / 2 {
			out[kk] = pairBF16(row[2*kk], row[2*kk+1])
		}
		out[kp-1] = uint32(ToBF16(row[k-1]))
	}
}

// gemmBF16 computes y (+)= bf16(x)·wᵀ for BF16 w with the bfloat16 pair
// micro-kernel: w's rows are split over the pool in bfNR-row panels; each
// worker packs a slab of w into panels and runs the kernel over every
// bfMR-row block of x against each panel. Every element of y is one dot
// product in the same pair order and kp-slab blocking, so each row's
// result is independent of m and of its place (edge tiles run the same
// kernel), as for gemm.
func gemmBF16(p *Pool, y, x []float32, w *Weights, m int, acc bool, kernel bf16KernelFunc) {
	n, k := w.n, w.k
	kp := (k + 1) / 2
	xb := getPairs(m * kp)
	defer pairScratch.Put(xb)
	xp := *xb
	p.Run((m+bfMR-1)/bfMR, func(lo, hi int) {
		packPairs(xp, x, k, kp, lo*bfMR, min(hi*bfMR, m))
	})
	p.Run((n+bfNR-1)/bfNR, func(lo, hi int) {
		bb := getPairs(bfKP*bfNC + bfMR*bfKP)
		b, edgeA := (*bb)[:bfKP*bfNC], (*bb)[bfKP*bfNC:]
		end := min(hi*bfNR, n)
		for jc := lo * bfNR; jc < end; jc += bfNC {
			nc := min(bfNC, end-jc)
			for pc := 0; pc < kp; pc += bfKP {
				kc := min(bfKP, kp-pc)
				packBF16Slab(b, w, jc, nc, pc, kc)
				add := acc || pc > 0
				for ic := 0; ic < m; ic += bfMC {
					ie := min(ic+bfMC, m)
					for jr := 0; jr < nc; jr += bfNR {
						bp := b[jr*kc : (jr+bfNR)*kc]
						cols := min(bfNR, nc-jr)
						for ir := ic; ir < ie; ir += bfMR {
							rows := min(bfMR, ie-ir)
							c := y[ir*n+jc+jr:]
							if rows == bfMR && cols == bfNR {
								kernel(kc, xp[ir*kp+pc:], kp, bp, c, n, add)
								continue
							}
							for r := range bfMR {
								ea := edgeA[r*kc : (r+1)*kc]
								if r < rows {
									copy(ea, xp[(ir+r)*kp+pc:])
								} else {
									clear(ea)
								}
							}
							var t [bfMR * bfNR]float32
							kernel(kc, edgeA, kc, bp, t[:], bfNR, false)
							storeTile(c, n, t[:], bfNR, rows, cols, add)
						}
					}
				}
			}
		}
		pairScratch.Put(bb)
	})
}

// bf16KernelFunc computes the bfMR×bfNR tile c[r·ldc+j] (+)= Σ_kk
// dot(a[r·lda+kk], b[h·16·kp+kk·16+j%16]) over kk < kp, where h = j/16,
// dot multiplies two pairs' low and high bfloat16 and adds the products;
// b is a panel packed by packBF16Slab, and c is added to when acc is set.
type bf16KernelFunc func(kp int, a []uint32, lda int, b []uint32, c []float32, ldc int, acc bool)

// packBF16Slab packs rows [j0, j0+nc) × pairs [pc, pc+kc) of the BF16 w
// into bfNR-row panels dst[jr·kc + h·16·kc + kk·16 + c] for the rows
// j0+jr+16h+c, zero-padding rows past nc and an odd k's last high half.
func packBF16Slab(dst []uint32, w *Weights, j0, nc, pc, kc int) {
	k := w.k
	for jr := 0; jr < nc; jr += bfNR {
		for h := range 2 {
			half := dst[jr*kc+h*16*kc : jr*kc+(h+1)*16*kc]
			j := j0 + jr + 16*h
			rows := min(16, nc-jr-16*h)
			if rows == 16 && k%2 == 0 && packPairs16(half, w.half[j*k+2*pc:], k/2, kc) {
				continue
			}
			clear(half)
			for c := range max(rows, 0) {
				row := w.half[(j+c)*k : (j+c+1)*k]
				for kk := range kc {
					e := 2 * (pc + kk)
					v := uint32(row[e])
					if e+1 < k {
						v |= uint32(row[e+1]) << 16
					}
					half[kk*16+c] = v
				}
			}
		}
	}
}

// pairDotFunc adds to out[(4q+i)·4+j], for q < quads and i, j < 4, the
// dot product over k pairs of x row 4q+i (row stride ldx pairs) with w
// row j (row stride ldw pairs, w read as bfloat16 pairs): the kernel of
// gemvPairs (dotPairQuadsBF16).
type pairDotFunc func(k int, x []uint32, ldx, quads int, w []uint16, ldw int, out []float32)

// pairKB is gemvPairs' k block in pairs: four rows of w of that length
// (16 KiB) stay in L1 while the rows of x pass over them.
const pairKB = 1024

// gemvPairs serves BF16 products of m <= gemvMaxM rows (k even, n >= 4)
// with the pair dot kernel: x is rounded into pairs once (padded with
// zero rows to a multiple of four), and each worker streams its groups
// of four rows of w, pairKB pairs at a time, against every quad of x
// rows; the last pairs past a multiple of 16 are summed in Go, and the
// last group of an n not a multiple of four is the last four rows, of
// which only the new ones are stored.
func gemvPairs(y, x []float32, w *Weights, m int, acc bool, dots pairDotFunc) gemvWork {
	n, k := w.n, w.k
	kp := k / 2
	mq := (m + 3) &^ 3
	xb := getPairs(mq * kp)
	xp := *xb
	packPairs(xp, x, k, kp, 0, m)
	clear(xp[m*kp:])
	k16 := kp &^ 15
	return gemvWork{units: (n + 3) / 4, run: func(lo, hi int) {
		quadGEMV(y, n, m, mq, acc, lo, hi, func(j0 int, s []float32) {
			for kb := 0; kb < k16; kb += pairKB {
				dots(min(pairKB, k16-kb), xp[kb:], kp, mq/4, w.half[j0*k+2*kb:], kp, s)
			}
		}, func(i, j0 int, s []float32) {
			for c := range 4 {
				row := w.half[(j0+c)*k : (j0+c+1)*k]
				for kk := k16; kk < kp; kk++ {
					a := xp[i*kp+kk]
					s[i*4+c] += FromBF16(uint16(a))*FromBF16(row[2*kk]) + FromBF16(uint16(a>>16))*FromBF16(row[2*kk+1])
				}
			}
		})
	}, free: func() { pairScratch.Put(xb) }}
}
