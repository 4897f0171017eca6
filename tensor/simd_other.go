//go:build !amd64 || noasm

package tensor

// Without the assembly kernels every dispatch goes to the portable Go code.

// asmAvailable reports whether assembly kernels exist in this build.
const asmAvailable = false

// avx512Available reports whether AVX-512 kernels exist in this build.
const avx512Available = false

// useAsm and useAVX512 exist so tests can range over kernel sets in every
// build.
var useAsm, useAVX512 = false, false

func dot(a, b []float32) float32                         { return dotGo(a, b) }
func dotRowsF32(out, x, w []float32, k int)              { dotRowsF32Go(out, x, w, k) }
func axpy(alpha float32, x, y []float32)                 { axpyGo(alpha, x, y) }
func axpyRows(y, a, w []float32, ldw int)                { axpyRowsGo(y, a, w, ldw) }
func scale(alpha float32, x []float32)                   { scaleGo(alpha, x) }
func add(dst, x []float32)                               { addGo(dst, x) }
func mulScale(out, x, w []float32, s float32)            { mulScaleGo(out, x, w, s) }
func siluMul(out, gate, up []float32)                    { siluMulGo(out, gate, up) }
func expSubSum(x []float32, m float32) float32           { return expSubSumGo(x, m) }
func maxOf(x []float32) float32                          { return maxGo(x) }
func indexOf(x []float32, v float32) int                 { return indexGo(x, v) }
func scoresAsm(s, x, w []float32, m, n, k, ldw int) bool { return false }
func quadKernel(k int) bool                              { return false }

func dotQuads(m, k int, x []float32, ldx int, w []float32, ldw int, sum []float32) int {
	return 0
}

func dotTile(rows, k int, x []float32, ldx int, w []float32, ldw int, out *[8]float32) {
	dotTileGo(rows, k, x, ldx, w, ldw, out)
}
