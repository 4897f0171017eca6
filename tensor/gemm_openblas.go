//go:build openblas && cgo

package tensor

import (
	"sync"

	"github.com/gearboxlm/gearbox/tensor/internal/openblas"
)

// RowsExact reports whether RowIndependentMin's promise is bit for bit:
// not under OpenBLAS, whose kernels may round a row differently with the
// rows beside it (Debian's 0.3.21 does on an AMD EPYC, while earlier CI
// machines kept rows exact), so a row is then the same only to float32
// rounding.
const RowsExact = false

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

// gemmWChunk is how many float32 a chunk of widened w rows holds in gemmW.
const gemmWChunk = 1 << 20

var gemmWScratch sync.Pool

// gemmW is gemm for BF16, F16 and Q8_0 weights: chunks of w's rows are
// widened to float32 over the pool, then multiplied by cblas_sgemm into
// the matching columns of y.
func gemmW(p *Pool, y, x []float32, w *Weights, m int, acc bool) {
	n, k := w.n, w.k
	rows := max(1, min(n, gemmWChunk/k))
	buf, _ := gemmWScratch.Get().(*[]float32)
	if buf == nil || cap(*buf) < rows*k {
		b := make([]float32, rows*k)
		buf = &b
	}
	wf := (*buf)[:rows*k]
	openblas.SetThreads(p.Threads())
	beta := float32(0)
	if acc {
		beta = 1
	}
	for j0 := 0; j0 < n; j0 += rows {
		r := min(rows, n-j0)
		p.Run(r, func(lo, hi int) {
			for j := lo; j < hi; j++ {
				w.decodeRow(wf[j*k:(j+1)*k], j0+j, 0)
			}
		})
		openblas.LinearTStrided(y[j0:], n, x, wf[:r*k], m, k, r, beta)
	}
	gemmWScratch.Put(buf)
}
