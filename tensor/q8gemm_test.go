package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// q8Kernels returns the Q8_0 prefill tile kernels this CPU runs: the
// portable one and, with AVX-512 VNNI, the assembly one.
func q8Kernels() map[string]q8TileFunc {
	ks := map[string]q8TileFunc{"go": q8TileGo}
	saved := [2]bool{useAsm, useAVX512}
	useAsm, useAVX512 = asmAvailable, avx512Available
	if t := q8Tile(); t != nil {
		ks["vnni"] = t
	}
	useAsm, useAVX512 = saved[0], saved[1]
	return ks
}

// q8RowByRow is the reference of gemmQ8: the decode GEMV (gemvQ8), which
// quantizes x the same way, one row of x at a time, with acc; and per
// element the scale Σ|d_x·x_q·w| of its terms.
func q8RowByRow(y0, x []float32, w *Weights, m int) (want []float32, scale []float64) {
	n, k := w.Shape()
	want = make([]float32, m*n)
	if y0 != nil {
		copy(want, y0)
	}
	scale = make([]float64, m*n)
	nbA := q8ActBlocks(w.nb)
	wf := make([]float32, k)
	for i := range m {
		gemvQ8(want[i*n:(i+1)*n], x[i*k:(i+1)*k], w, 1, y0 != nil).do(nil)
		a := getQ8Act(1, nbA)
		quantizeAct(a.q, a.c, a.d, x[i*k:(i+1)*k])
		for j := range n {
			w.Row(j, wf)
			var s float64
			for c, v := range wf {
				s += math.Abs(float64(a.q[c]) * float64(a.d[c/Q8Block]) * float64(v))
			}
			if y0 != nil {
				s += math.Abs(float64(y0[i*n+j]))
			}
			scale[i*n+j] = s
		}
		q8ActPool.Put(a)
	}
	return want, scale
}

// TestGemmQ8 checks Q8_0 prefill by int8 tiles, with each kernel, against
// the decode GEMV run row by row: equal up to float32 summation order,
// |Δ| <= 2·(nb+8)·2⁻²⁴·Σ|terms| for the nb blocks of a row (each side
// rounds at most nb+8 times: a block's scaling and its addition, and the
// lane sums). Shapes cover m just past gemvMaxM and not a multiple of the
// tile, k a multiple of 32 but not of a group, k not a multiple of 32, k
// over one chunk (4096), n odd and over one slab (48); x and y sit at odd
// offsets in larger buffers, whose other elements must stay untouched, w
// is a Rows view, and acc is both false and true.
func TestGemmQ8(t *testing.T) {
	type shape struct{ m, k, n int }
	shapes := []shape{
		{gemvMaxM + 1, 96, 7}, {33, 1056, 53}, {64, 100, 5}, {512, 160, 51},
		{35, 4200, 9}, {61, 2048 + 32, 3},
	}
	p := NewPool(3)
	defer p.Close()
	r := rand.New(rand.NewPCG(41, 42))
	for _, s := range shapes {
		full := QuantizeQ8_0(nil, NewWeightsF32(randSlice(r, (s.n+2)*s.k), s.n+2, s.k))
		w := full.Rows(1, s.n+1)
		nb := w.nb
		const off = 5
		xb := randSlice(r, s.m*s.k+2*off)
		x := xb[off : off+s.m*s.k]
		y0 := randSlice(r, s.m*s.n)
		for _, acc := range []bool{false, true} {
			var base []float32
			if acc {
				base = y0
			}
			want, scale := q8RowByRow(base, x, w, s.m)
			for name, tile := range q8Kernels() {
				label := fmt.Sprintf("%s m=%d k=%d n=%d acc=%v", name, s.m, s.k, s.n, acc)
				yb := randSlice(r, s.m*s.n+2*off)
				guard := append([]float32(nil), yb...)
				y := yb[off : off+s.m*s.n]
				copy(y, y0)
				gemmQ8(p, y, x, w, s.m, acc, tile)
				for i := range yb {
					if (i < off || i >= off+len(y)) && yb[i] != guard[i] {
						t.Fatalf("%s: wrote outside y at %d", label, i-off)
					}
				}
				tol := 2 * float64(nb+8) * 0x1p-24
				for i, v := range y {
					if !within(v, float64(want[i]), scale[i], tol) {
						t.Fatalf("%s: y[%d]=%v, row by row %v (scale %v)", label, i, v, want[i], scale[i])
					}
				}
			}
		}
	}
}

// TestInterleaveQ8 checks the unit layout: dword t·16+l is dword t of
// block l.
func TestInterleaveQ8(t *testing.T) {
	u := make([]uint8, q8UnitBytes)
	for i := range u {
		u[i] = uint8(i * 7)
	}
	src := append([]uint8(nil), u...)
	interleaveQ8(u, src)
	for l := range q8Unit {
		for c := range 8 {
			for b := range 4 {
				if got, want := u[(c*q8Unit+l)*4+b], src[l*32+c*4+b]; got != want {
					t.Fatalf("block %d dword %d byte %d: %d want %d", l, c, b, got, want)
				}
			}
		}
	}
}
