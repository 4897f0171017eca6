package tensor

import "fmt"

// MatMul computes y = x·wᵀ: y[i*n+j] = Σ_kk x[i*k+kk]·w[j*k+kk], with
// x [m×k], w [n×k] (nn.Linear layout [out, in]) and y [m×n], all row-major.
// y is overwritten and must not overlap x or w. The pool p (nil: the caller
// alone) splits the work over blocks of w's rows; MatMul may run
// concurrently with other kernels that share p. m, k, n >= 0; with k == 0,
// y is zeroed.
func MatMul(p *Pool, y, x, w []float32, m, k, n int) {
	checkMatMul("tensor.MatMul", y, x, w, m, k, n)
	matmul(p, y, x, w, m, k, n, false)
}

// MatMulAcc computes y += x·wᵀ with the shapes and rules of MatMul; it fuses
// a residual add into the projection that produces it.
func MatMulAcc(p *Pool, y, x, w []float32, m, k, n int) {
	checkMatMul("tensor.MatMulAcc", y, x, w, m, k, n)
	matmul(p, y, x, w, m, k, n, true)
}

func checkMatMul(name string, y, x, w []float32, m, k, n int) {
	switch {
	case m < 0 || k < 0 || n < 0:
		panic(fmt.Sprintf("%s: negative shape m=%d k=%d n=%d", name, m, k, n))
	case len(x) != m*k:
		panic(fmt.Sprintf("%s: len(x)=%d want m*k=%d", name, len(x), m*k))
	case len(w) != n*k:
		panic(fmt.Sprintf("%s: len(w)=%d want n*k=%d", name, len(w), n*k))
	case len(y) != m*n:
		panic(fmt.Sprintf("%s: len(y)=%d want m*n=%d", name, len(y), m*n))
	}
}

// matmul dispatches on m: small products to gemv, the rest to gemm.
func matmul(p *Pool, y, x, w []float32, m, k, n int, acc bool) {
	switch {
	case m == 0 || n == 0:
	case k == 0:
		if !acc {
			clear(y)
		}
	case m <= gemvMaxM:
		gemv(y, x, w, m, k, n, acc).do(p)
	default:
		gemm(p, y, x, w, m, k, n, acc)
	}
}
