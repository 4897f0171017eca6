//go:build !openblas || !cgo

package tensor

// Blocking of the packed GEMM (BLIS scheme, sized for 32 KiB L1 and
// 1 MiB L2 per core). A packed kcBlock×ncBlock slab of w (512 KiB) sits in
// L2/L3, a packed mcBlock×kcBlock block of x (96 KiB) in L2, and each
// kcBlock×nr panel of w (16 KiB) in L1 across mcBlock/mr micro-kernel calls.
const (
	mr      = 6   // micro-tile rows (rows of x)
	nr      = 16  // micro-tile columns (rows of w)
	kcBlock = 256 // depth of one packed slab (k direction)
	mcBlock = 96  // x rows per pass over a w slab; multiple of mr
	ncBlock = 512 // w rows per packed slab; multiple of nr
)

// RowsExact reports whether RowIndependentMin's promise is bit for bit:
// it is for the packed GEMM here; OpenBLAS's kernels (-tags openblas) may
// round a row differently with the rows beside it.
const RowsExact = true

// gemm splits w's rows over the pool. Each worker walks its rows in slabs
// of ncBlock, packs a kcBlock-deep slab of w into nr-row panels, then for
// each mcBlock rows of x packs them into mr-row panels and runs the
// micro-kernel over every panel pair: the x block stays in L2 and each w
// panel in L1 while it is reused.
func gemm(p *Pool, y, x, w []float32, m, k, n int, acc bool) {
	gemmPacked(p, y, x, m, k, n, acc, func(dst, _ []float32, j0, nc, pc, kc int) {
		packB(dst, w, k, j0, nc, pc, kc)
	})
}

// gemmW is gemm for BF16, F16 and Q8_0 weights: each nr-row panel of a
// slab is widened (or dequantized) to float32 into an L1 buffer and
// packed from there, so the micro-kernel and its blocking are gemm's.
func gemmW(p *Pool, y, x []float32, w *Weights, m int, acc bool) {
	gemmPacked(p, y, x, m, w.k, w.n, acc, func(dst, tmp []float32, j0, nc, pc, kc int) {
		for jr := 0; jr < nc; jr += nr {
			cols := min(nr, nc-jr)
			for c := range cols {
				w.decodeRow(tmp[c*kc:(c+1)*kc], j0+jr+c, pc)
			}
			packB(dst[jr*kc:], tmp, kc, 0, cols, 0, kc)
		}
	})
}

// packFunc packs rows [j0, j0+nc) × columns [pc, pc+kc) of w into dst as
// packB does; tmp is a scratch of nr·kcBlock floats.
type packFunc func(dst, tmp []float32, j0, nc, pc, kc int)

// gemmPacked is the body of gemm, packing w's slabs with pack.
func gemmPacked(p *Pool, y, x []float32, m, k, n int, acc bool, pack packFunc) {
	p.Run((n+nr-1)/nr, func(lo, hi int) {
		abuf := getScratch(mcBlock * kcBlock)
		bbuf := getScratch(kcBlock*ncBlock + nr*kcBlock)
		a, b, tmp := *abuf, (*bbuf)[:kcBlock*ncBlock], (*bbuf)[kcBlock*ncBlock:]
		end := min(hi*nr, n)
		for jc := lo * nr; jc < end; jc += ncBlock {
			nc := min(ncBlock, end-jc)
			for pc := 0; pc < k; pc += kcBlock {
				kc := min(kcBlock, k-pc)
				pack(b, tmp, jc, nc, pc, kc)
				add := acc || pc > 0
				for ic := 0; ic < m; ic += mcBlock {
					mc := min(mcBlock, m-ic)
					for ir := 0; ir < mc; ir += mr {
						packA(a[ir*kc:(ir+mr)*kc], x, k, ic+ir, min(mr, mc-ir), pc, kc)
					}
					for jr := 0; jr < nc; jr += nr {
						bp := b[jr*kc : (jr+nr)*kc]
						cols := min(nr, nc-jr)
						for ir := 0; ir < mc; ir += mr {
							ap := a[ir*kc : (ir+mr)*kc]
							rows := min(mr, mc-ir)
							c := y[(ic+ir)*n+jc+jr:]
							if rows == mr && cols == nr {
								microKernel(kc, ap, bp, c, n, add)
							} else {
								edgeKernel(kc, ap, bp, c, n, rows, cols, add)
							}
						}
					}
				}
			}
		}
		putScratch(abuf)
		putScratch(bbuf)
	})
}

// edgeKernel runs the micro-kernel into a scratch tile and stores its
// rows×cols corner into c.
func edgeKernel(kc int, a, b, c []float32, ldc, rows, cols int, add bool) {
	var t [mr * nr]float32
	microKernel(kc, a, b, t[:], nr, false)
	storeTile(c, ldc, t[:], nr, rows, cols, add)
}

// packA packs rows [i0, i0+rows) × columns [pc, pc+kc) of x (row stride k)
// into dst[kk*mr+r], padding to mr rows with zeros.
func packA(dst, x []float32, k, i0, rows, pc, kc int) {
	if rows == mr {
		packA6(dst, x[i0*k+pc:], k, kc)
		return
	}
	for r := range rows {
		src := x[(i0+r)*k+pc : (i0+r)*k+pc+kc]
		for kk, v := range src {
			dst[kk*mr+r] = v
		}
	}
	for r := rows; r < mr; r++ {
		for kk := range kc {
			dst[kk*mr+r] = 0
		}
	}
}

// packB packs rows [j0, j0+nc) × columns [pc, pc+kc) of w (row stride k)
// into nr-row panels dst[jr*kc + kk*nr + c], zero-padding the last panel.
func packB(dst, w []float32, k, j0, nc, pc, kc int) {
	for jr := 0; jr < nc; jr += nr {
		panel := dst[jr*kc : (jr+nr)*kc]
		src := w[(j0+jr)*k+pc:]
		cols := min(nr, nc-jr)
		if cols == nr {
			packB16(panel, src, k, kc)
			continue
		}
		clear(panel)
		for c := range cols {
			row := src[c*k : c*k+kc]
			for kk, v := range row {
				panel[kk*nr+c] = v
			}
		}
	}
}

// microKernelGo is the portable form of the GEMM micro-kernel: it computes
// the mr×nr tile c[r*ldc+j] (+)= Σ_kk a[kk*mr+r]·b[kk*nr+j] from packed
// panels a (kc×mr) and b (kc×nr), adding to c when acc is set.
func microKernelGo(kc int, a, b, c []float32, ldc int, acc bool) {
	var t [mr][nr]float32
	a = a[:kc*mr]
	b = b[:kc*nr]
	for kk := range kc {
		bv := (*[nr]float32)(b[kk*nr:])
		av := (*[mr]float32)(a[kk*mr:])
		for r := range mr {
			ar := av[r]
			tr := &t[r]
			for j := range nr {
				tr[j] += ar * bv[j]
			}
		}
	}
	for r := range mr {
		row := (*[nr]float32)(c[r*ldc:])
		if acc {
			for j := range nr {
				row[j] += t[r][j]
			}
		} else {
			*row = t[r]
		}
	}
}

// packB16Go packs columns [k0,kc) of a full 16-row panel:
// dst[kk*16+r] = src[r*lds+kk].
func packB16Go(dst, src []float32, lds, k0, kc int) {
	for r := range nr {
		row := src[r*lds : r*lds+kc]
		for kk := k0; kk < kc; kk++ {
			dst[kk*nr+r] = row[kk]
		}
	}
}

// packA6Go packs columns [k0,kc) of a full 6-row panel:
// dst[kk*6+r] = src[r*lds+kk].
func packA6Go(dst, src []float32, lds, k0, kc int) {
	for r := range mr {
		row := src[r*lds : r*lds+kc]
		for kk := k0; kk < kc; kk++ {
			dst[kk*mr+r] = row[kk]
		}
	}
}
