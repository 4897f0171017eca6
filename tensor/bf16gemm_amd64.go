//go:build amd64 && !noasm && (!openblas || !cgo)

package tensor

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// bf16Available reports whether gemmBF16x12x32 can run (AVX-512 BF16).
var bf16Available = avx512Available && cpu.X86.HasAVX512BF16

// gemmBF16x12x32 is the bfloat16 pair micro-kernel (bf16gemm_amd64.s);
// see bf16KernelFunc. kp >= 1.
//
//go:noescape
func gemmBF16x12x32(kp int, a *uint32, lda int, b *uint32, c *float32, ldc int, acc bool)

func bf16KernelAsm(kp int, a []uint32, lda int, b []uint32, c []float32, ldc int, acc bool) {
	_ = a[(bfMR-1)*lda+kp-1]
	_ = b[bfNR*kp-1]
	_ = c[(bfMR-1)*ldc+bfNR-1]
	gemmBF16x12x32(kp, &a[0], lda, &b[0], &c[0], ldc, acc)
}

// pairsBF16AVX512 rounds the 2n floats at src to n bfloat16 pairs at dst
// (ties to even, denormals to zero); n%16 == 0, n > 0.
//
//go:noescape
func pairsBF16AVX512(dst *uint32, src *float32, n int)

// pairsAsm rounds the leading pairs of src into dst as pairBF16 does
// (except that denormals become zero, which the pair kernel makes of
// them anyway) and returns how many it did: a multiple of 16, or 0.
func pairsAsm(dst []uint32, src []float32) int {
	n := min(len(dst), len(src)/2) &^ 15
	if n == 0 || bf16Kernel() == nil {
		return 0
	}
	pairsBF16AVX512(&dst[0], &src[0], n)
	return n
}

func pairQuadsAsm(k int, x []uint32, ldx, quads int, w []uint16, ldw int, out []float32) {
	_ = x[(4*quads-1)*ldx+k-1]
	_ = w[2*(3*ldw+k)-1]
	_ = out[16*quads-1]
	dotPairQuadsBF16(k, &x[0], ldx, quads, &w[0], ldw, &out[0])
}

// pairDots returns the pair dot kernel of gemvPairs where the CPU has
// AVX-512 BF16, else nil.
func pairDots() pairDotFunc {
	if bf16Kernel() == nil {
		return nil
	}
	return pairQuadsAsm
}

// bf16Kernel returns the pair micro-kernel when the CPU multiplies
// bfloat16 pairs in hardware, else nil (products then widen w instead).
func bf16Kernel() bf16KernelFunc {
	if useAsm && useAVX512 && bf16Available {
		return bf16KernelAsm
	}
	return nil
}

// packPairs16 packs a full 16-row half panel of pairs, dst[kk·16+c] =
// the pair at src[2(c·lds+kk):], for kk < kc, with the float32 transpose
// (pairs are 32-bit), and reports whether it did.
func packPairs16(dst []uint32, src []uint16, lds, kc int) bool {
	k8 := kc &^ 7
	if !useAsm || k8 == 0 {
		return false
	}
	_ = dst[16*kc-1]
	_ = src[2*(15*lds+kc)-1]
	pack16AVX2((*float32)(unsafe.Pointer(&dst[0])), (*float32)(unsafe.Pointer(&src[0])), lds, k8)
	for c := range 16 {
		for kk := k8; kk < kc; kk++ {
			e := 2 * (c*lds + kk)
			dst[kk*16+c] = uint32(src[e]) | uint32(src[e+1])<<16
		}
	}
	return true
}
