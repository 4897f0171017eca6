//go:build openblas && cgo

package openblas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import (
	"sync"
	"unsafe"
)

// threads guards OpenBLAS's process-wide thread count.
var threads struct {
	sync.Mutex
	n int
}

// SetThreads sets how many threads OpenBLAS uses, skipping the call when
// the count is unchanged. It is safe for concurrent use, but the setting
// is global to the process: concurrent callers asking for different counts
// each get one of them.
func SetThreads(n int) {
	threads.Lock()
	defer threads.Unlock()
	if n != threads.n {
		C.openblas_set_num_threads(C.int(n))
		threads.n = n
	}
}

// LinearT computes y = x·wᵀ + beta·y by cblas_sgemm (RowMajor, NoTrans,
// Trans) for row-major x [m×k], w [n×k], y [m×n]. m, n, k >= 1; lengths
// are the caller's responsibility.
func LinearT(y, x, w []float32, m, k, n int, beta float32) {
	LinearTStrided(y, n, x, w, m, k, n, beta)
}

// LinearTStrided is LinearT with y's rows ldy >= n apart: it updates the
// m×n block of y at y[0], y[ldy], ….
func LinearTStrided(y []float32, ldy int, x, w []float32, m, k, n int, beta float32) {
	_, _, _ = y[(m-1)*ldy+n-1], x[m*k-1], w[n*k-1]
	C.cblas_sgemm(C.CblasRowMajor, C.CblasNoTrans, C.CblasTrans,
		C.blasint(m), C.blasint(n), C.blasint(k),
		1, (*C.float)(unsafe.Pointer(&x[0])), C.blasint(k),
		(*C.float)(unsafe.Pointer(&w[0])), C.blasint(k),
		C.float(beta), (*C.float)(unsafe.Pointer(&y[0])), C.blasint(ldy))
}
