//go:build amd64 && !noasm

package tensor

import (
	"math"

	"golang.org/x/sys/cpu"
)

// asmAvailable reports whether this CPU can run the AVX2+FMA kernels.
var asmAvailable = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// avx512Available reports whether the AVX-512 (F, VL) kernels can run.
var avx512Available = asmAvailable && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL

// useAsm selects the assembly kernels. It is fixed at start-up; tests turn
// it off to check the portable kernels on the same machine.
var useAsm = asmAvailable

// useAVX512 additionally selects the AVX-512 kernels where they measured
// faster than AVX2 on Zen 4 (whose 512-bit units are double-pumped); it
// has no effect unless useAsm is set.
var useAVX512 = avx512Available

// Assembly kernels (simd_amd64.s). Each works on n/8 whole vectors of 8
// floats unless noted; the Go wrappers below finish the tails.

//go:noescape
func axpyAVX2(alpha float32, x, y *float32, n int)

// dotRowsAVX2 sets out[r] to the dot product of x with row r < rows of w
// (row stride ldw); k%8 == 0, k, rows > 0. dot is its one-row case. It
// is in lowp_amd64.s, sharing DOTROWS with the 16-bit row kernels.
//
//go:noescape
func dotRowsAVX2(x, w *float32, k, ldw, rows int, out *float32)

// axpyRowsAVX2 adds Σ_r a[r]·w[r·ldw+i] to y[i] for i < n (n%8 == 0),
// rows rows > 0, keeping y in registers across the rows.
//
//go:noescape
func axpyRowsAVX2(y, a, w *float32, n, ldw, rows int)

//go:noescape
func scaleAVX2(alpha float32, x *float32, n int)

//go:noescape
func addAVX2(dst, x *float32, n int)

//go:noescape
func mulScaleAVX2(out, x, w *float32, s float32, n int)

//go:noescape
func siluMulAVX2(out, gate, up *float32, n int)

//go:noescape
func expSubSumAVX2(x *float32, m float32, n int) float32

//go:noescape
func maxAVX2(x *float32, n int) float32

// indexAVX2 returns the first i < n with x[i] == v, or n.
//
//go:noescape
func indexAVX2(x *float32, n int, v float32) int

// dotQuadsAVX512 adds to out[(4q+i)*4+j], for q < quads and i, j < 4, the
// dot product of x row 4q+i (row stride ldx) with w row j (row stride ldw)
// over k elements (k%16 == 0, k > 0, quads > 0).
//
//go:noescape
func dotQuadsAVX512(k int, x *float32, ldx int, quads int, w *float32, ldw int, out *float32)

// dotQuadsF16AVX512 is dotQuadsAVX512 over binary16 w rows (row stride ldw
// elements), each weight widened to float32 as it loads (F16C).
//
//go:noescape
func dotQuadsF16AVX512(k int, x *float32, ldx int, quads int, w *uint16, ldw int, out *float32)

// dot1x4AVX2 sets out[j] = Σ x[kk]·w[j*ldw+kk] for j < 4, kk < k (k%8 == 0).
//
//go:noescape
func dot1x4AVX2(k int, x, w *float32, ldw int, out *float32)

// dot2x4AVX2 is dot1x4AVX2 for two x rows: out[i*4+j], i < 2.
//
//go:noescape
func dot2x4AVX2(k int, x *float32, ldx int, w *float32, ldw int, out *float32)

func dot(a, b []float32) float32 {
	n := len(a) &^ 7
	if !useAsm || n == 0 {
		return dotGo(a, b)
	}
	var r float32
	dotRowsAVX2(&a[0], &b[0], n, n, 1, &r)
	return r + dotGo(a[n:], b[n:])
}

// dotRowsF32 sets out[r] = dot(x, w[r·k:(r+1)·k]) for r < len(out), bit
// for bit, in one assembly loop where k is whole vectors.
func dotRowsF32(out, x, w []float32, k int) {
	rows := len(out)
	if !useAsm || k == 0 || k%8 != 0 || rows == 0 {
		dotRowsF32Go(out, x, w, k)
		return
	}
	_, _ = x[k-1], w[rows*k-1]
	dotRowsAVX2(&x[0], &w[0], k, k, rows, &out[0])
}

func axpyRows(y, a, w []float32, ldw int) {
	n, rows := len(y), len(a)
	nv := n &^ 7
	if !useAsm || nv == 0 || rows == 0 {
		axpyRowsGo(y, a, w, ldw)
		return
	}
	_ = w[(rows-1)*ldw+n-1]
	axpyRowsAVX2(&y[0], &a[0], &w[0], nv, ldw, rows)
	if nv == n {
		return
	}
	for r, v := range a {
		axpyGo(v, w[r*ldw+nv:r*ldw+n], y[nv:])
	}
}

// scoresAsm is Scores straight onto the dot-tile kernels, for k a
// nonzero multiple of 16 (or 8, below 16) and n ≥ 4; it reports false,
// doing nothing, otherwise. It calls the kernels scores's wrappers
// would, in its order (gemvMaxM rows at a time: AVX-512 quads of rows,
// then single rows, four keys at a time, the last few in the last four),
// so the scores are bit for bit the general path's, without its Go
// wrappers around every group of keys: a decode attention block of 16
// keys and one query head spent half its time in them.
func scoresAsm(s, x, w []float32, m, n, k, ldw int) bool {
	if !useAsm || k == 0 || n < 4 {
		return false // n < 4: scores takes them key by key
	}
	var quad bool
	switch {
	case k%16 == 0:
		quad = useAVX512
	case k < 16 && k%8 == 0: // no quads for so short a k: every row alone
	default:
		return false // a tail for dotGo
	}
	if m == 0 {
		return true
	}
	_, _, _ = x[m*k-1], w[(n-1)*ldw+k-1], s[m*n-1]
	var sum [gemvMaxM * 4]float32
	for i0 := 0; i0 < m; i0 += gemvMaxM {
		mm := min(gemvMaxM, m-i0)
		xi := x[i0*k:]
		quads := 0
		if quad {
			quads = mm / 4
		}
		for j := 0; j < n; j += 4 {
			j0 := min(j, n-4) // the last few keys: the last four
			wj := &w[j0*ldw]
			if quads > 0 {
				clear(sum[:quads*16])
				dotQuadsAVX512(k, &xi[0], k, quads, wj, ldw, &sum[0])
			}
			for i := 4 * quads; i < mm; i++ {
				dot1x4AVX2(k, &xi[i*k], wj, ldw, &sum[i*4]) // rounds as the quads do
			}
			storeGroup(s[i0*n:], sum[:mm*4], n, j, j0)
		}
	}
	return true
}

func axpy(alpha float32, x, y []float32) {
	n := len(x) &^ 7
	if !useAsm || n == 0 {
		axpyGo(alpha, x, y)
		return
	}
	axpyAVX2(alpha, &x[0], &y[0], n)
	axpyGo(alpha, x[n:], y[n:])
}

func scale(alpha float32, x []float32) {
	n := len(x) &^ 7
	if !useAsm || n == 0 {
		scaleGo(alpha, x)
		return
	}
	scaleAVX2(alpha, &x[0], n)
	scaleGo(alpha, x[n:])
}

func add(dst, x []float32) {
	n := len(dst) &^ 7
	if !useAsm || n == 0 {
		addGo(dst, x)
		return
	}
	addAVX2(&dst[0], &x[0], n)
	addGo(dst[n:], x[n:])
}

func mulScale(out, x, w []float32, s float32) {
	n := len(out) &^ 7
	if !useAsm || n == 0 {
		mulScaleGo(out, x, w, s)
		return
	}
	mulScaleAVX2(&out[0], &x[0], &w[0], s, n)
	mulScaleGo(out[n:], x[n:], w[n:], s)
}

func siluMul(out, gate, up []float32) {
	n := len(out) &^ 7
	if !useAsm || n == 0 {
		siluMulGo(out, gate, up)
		return
	}
	siluMulAVX2(&out[0], &gate[0], &up[0], n)
	siluMulGo(out[n:], gate[n:], up[n:])
}

func expSubSum(x []float32, m float32) float32 {
	n := len(x) &^ 7
	if !useAsm || n == 0 {
		return expSubSumGo(x, m)
	}
	return expSubSumAVX2(&x[0], m, n) + expSubSumGo(x[n:], m)
}

func maxOf(x []float32) float32 {
	n := len(x) &^ 7
	if !useAsm || n == 0 {
		return maxGo(x)
	}
	return max(maxAVX2(&x[0], n), maxGo(x[n:]))
}

func indexOf(x []float32, v float32) int {
	n := len(x) &^ 7
	if !useAsm || n == 0 || math.IsNaN(float64(v)) {
		return indexGo(x, v)
	}
	if i := indexAVX2(&x[0], n, v); i < n {
		return i
	}
	if i := indexGo(x[n:], v); i >= 0 {
		return n + i
	}
	return -1
}

// quadKernel reports whether dotQuads runs its AVX-512 kernel for k
// (over k&^15 elements, the rest by dotGo).
func quadKernel(k int) bool { return useAsm && useAVX512 && k&^15 > 0 }

// dotQuads adds to sum[i*4+j] the dot products of x rows i < m (row
// stride ldx) with w rows j < 4 (row stride ldw) over k elements for as
// many whole quads of x rows as the AVX-512 kernel takes, and returns how
// many rows it did (0 when that kernel is off).
func dotQuads(m, k int, x []float32, ldx int, w []float32, ldw int, sum []float32) int {
	k16 := k &^ 15
	if !quadKernel(k) || m < 4 {
		return 0
	}
	q := m / 4
	_ = x[(4*q-1)*ldx+k-1]
	_ = w[3*ldw+k-1]
	_ = sum[16*q-1]
	dotQuadsAVX512(k16, &x[0], ldx, q, &w[0], ldw, &sum[0])
	if k16 < k {
		for i := range 4 * q {
			xi := x[i*ldx+k16 : i*ldx+k]
			for j := range 4 {
				sum[i*4+j] += dotGo(xi, w[j*ldw+k16:j*ldw+k])
			}
		}
	}
	return 4 * q
}

func dotTile(rows, k int, x []float32, ldx int, w []float32, ldw int, out *[8]float32) {
	k8 := k &^ 7
	if !useAsm || k8 == 0 {
		dotTileGo(rows, k, x, ldx, w, ldw, out)
		return
	}
	_ = w[3*ldw+k-1]
	_ = x[(rows-1)*ldx+k-1]
	if rows == 2 {
		dot2x4AVX2(k8, &x[0], ldx, &w[0], ldw, &out[0])
	} else {
		dot1x4AVX2(k8, &x[0], &w[0], ldw, &out[0])
	}
	if k8 == k {
		return
	}
	for i := range rows {
		xi := x[i*ldx+k8 : i*ldx+k]
		for j := range 4 {
			out[i*4+j] += dotGo(xi, w[j*ldw+k8:j*ldw+k])
		}
	}
}

// expConst holds the constants of the vector exp in simd_amd64.s, each
// repeated across one 8-lane vector: clamp bounds, log2(e), ln2 split in a
// high and a low part, the Cephes expf polynomial, 1, the exponent bias,
// and -Inf for maxAVX2. Offsets (×32 bytes) are fixed by the assembly.
//
//lint:ignore U1000 read only by simd_amd64.s, which staticcheck cannot see
var expConst = func() (t [14][8]uint32) {
	vals := [14]uint32{
		math.Float32bits(88),
		math.Float32bits(-88),
		math.Float32bits(math.Log2E),
		math.Float32bits(0.693359375),
		math.Float32bits(-2.12194440e-4),
		math.Float32bits(1.9875691500e-4),
		math.Float32bits(1.3981999507e-3),
		math.Float32bits(8.3334519073e-3),
		math.Float32bits(4.1665795894e-2),
		math.Float32bits(1.6666665459e-1),
		math.Float32bits(5.0000001201e-1),
		math.Float32bits(1),
		127,
		math.Float32bits(float32(math.Inf(-1))),
	}
	for i, v := range vals {
		for j := range t[i] {
			t[i][j] = v
		}
	}
	return t
}()

// dotPairQuadsBF16 is dotQuadsAVX512 over rows of bfloat16 pairs (AVX-512
// BF16): k pairs a row (k%16 == 0), ldx and ldw in pairs, each pair's two
// products added into the lane.
//
//go:noescape
func dotPairQuadsBF16(k int, x *uint32, ldx int, quads int, w *uint16, ldw int, out *float32)
