//go:build amd64 && !noasm && (!openblas || !cgo)

package tensor

// Assembly kernels of the packed GEMM (gemm_amd64.s).

// gemm6x16AVX2 is the GEMM micro-kernel; see microKernelGo. kc >= 1.
//
//go:noescape
func gemm6x16AVX2(kc int, a, b, c *float32, ldc int, acc bool)

// pack16AVX2 transposes 16 rows of src (row stride lds) by kc columns into
// dst[kk*16+r] = src[r*lds+kk]. kc must be a multiple of 8.
//
//go:noescape
func pack16AVX2(dst, src *float32, lds, kc int)

// pack6AVX2 is pack16AVX2 for 6 rows: dst[kk*6+r] = src[r*lds+kk].
//
//go:noescape
func pack6AVX2(dst, src *float32, lds, kc int)

func microKernel(kc int, a, b, c []float32, ldc int, acc bool) {
	if !useAsm {
		microKernelGo(kc, a, b, c, ldc, acc)
		return
	}
	_ = c[(mr-1)*ldc+nr-1]
	gemm6x16AVX2(kc, &a[0], &b[0], &c[0], ldc, acc)
}

// packB16 packs a full 16-row panel: dst[kk*16+r] = src[r*lds+kk], kk < kc.
func packB16(dst, src []float32, lds, kc int) {
	_ = dst[kc*nr-1]
	_ = src[(nr-1)*lds+kc-1]
	k8 := kc &^ 7
	if useAsm && k8 > 0 {
		pack16AVX2(&dst[0], &src[0], lds, k8)
	} else {
		k8 = 0
	}
	packB16Go(dst, src, lds, k8, kc)
}

// packA6 packs a full 6-row panel: dst[kk*6+r] = src[r*lds+kk], kk < kc.
func packA6(dst, src []float32, lds, kc int) {
	_ = dst[kc*mr-1]
	_ = src[(mr-1)*lds+kc-1]
	k8 := kc &^ 7
	if useAsm && k8 > 0 {
		pack6AVX2(&dst[0], &src[0], lds, k8)
	} else {
		k8 = 0
	}
	packA6Go(dst, src, lds, k8, kc)
}
