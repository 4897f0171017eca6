//go:build (!amd64 || noasm) && (!openblas || !cgo)

package tensor

// Without the assembly kernels the packed GEMM runs the portable Go code.

func microKernel(kc int, a, b, c []float32, ldc int, acc bool) {
	microKernelGo(kc, a, b, c, ldc, acc)
}

func packB16(dst, src []float32, lds, kc int) { packB16Go(dst, src, lds, 0, kc) }
func packA6(dst, src []float32, lds, kc int)  { packA6Go(dst, src, lds, 0, kc) }
