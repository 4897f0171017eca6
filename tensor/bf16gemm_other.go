//go:build !amd64 || noasm || (openblas && cgo)

package tensor

// Without the assembly kernels (and with OpenBLAS) BF16 products widen w
// (gemmW).

func bf16Kernel() bf16KernelFunc { return nil }

func pairDots() pairDotFunc { return nil }

func packPairs16([]uint32, []uint16, int, int) bool { return false }

func pairsAsm([]uint32, []float32) int { return 0 }
