//go:build openblas && cgo

package tensor

import "github.com/gearboxlm/gearbox/tensor/internal/openblas"

// gemm hands the product to OpenBLAS's cblas_sgemm (beta 1 when
// accumulating), with OpenBLAS's own threads set to the pool's size; the
// pool's workers are not used. Decode-sized products never get here: gemv
// reads w several times faster than cblas_sgemm does at such small m.
func gemm(p *Pool, y, x, w []float32, m, k, n int, acc bool) {
	openblas.SetThreads(p.Threads())
	beta := float32(0)
	if acc {
		beta = 1
	}
	openblas.LinearT(y, x, w, m, k, n, beta)
}
