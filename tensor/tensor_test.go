package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// forEachImpl runs f once per kernel set this build and CPU offer.
func forEachImpl(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	sets := []struct {
		name        string
		asm, avx512 bool
	}{
		{"go", false, false},
		{"avx2", true, false},
		{"avx512", true, true},
	}
	for _, s := range sets {
		if s.asm && !asmAvailable || s.avx512 && !avx512Available {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			savedAsm, saved512 := useAsm, useAVX512
			useAsm, useAVX512 = s.asm, s.avx512
			defer func() { useAsm, useAVX512 = savedAsm, saved512 }()
			f(t)
		})
	}
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// within reports whether got is within rel·scale of want.
func within(got float32, want, scale, rel float64) bool {
	return math.Abs(float64(got)-want) <= rel*scale+1e-30
}

// vectorLengths cover empty, sub-vector, vector-tail and unrolled sizes.
var vectorLengths = []int{0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257, 1000, 4099}

func TestDot(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, n := range vectorLengths {
			a, b := randSlice(r, n), randSlice(r, n)
			var want, scale float64
			for i := range a {
				want += float64(a[i]) * float64(b[i])
				scale += math.Abs(float64(a[i]) * float64(b[i]))
			}
			if got := Dot(a, b); !within(got, want, scale, 1e-6) {
				t.Errorf("n=%d: Dot=%v want %v", n, got, want)
			}
		}
	})
}

func TestElementwise(t *testing.T) {
	type op struct {
		name string
		run  func(x, y []float32) // y is the in/out operand
		want func(x, y float64) float64
	}
	const alpha = 0.75
	ops := []op{
		{"Axpy", func(x, y []float32) { Axpy(alpha, x, y) }, func(x, y float64) float64 { return y + alpha*x }},
		{"Scale", func(_, y []float32) { Scale(alpha, y) }, func(_, y float64) float64 { return alpha * y }},
		{"Add", func(x, y []float32) { Add(y, x) }, func(x, y float64) float64 { return y + x }},
		{"SiLUMul", func(x, y []float32) { SiLUMul(y, x, y) }, func(x, y float64) float64 { return x / (1 + math.Exp(-x)) * y }},
		{"SiLUMulAliasGate", func(x, y []float32) { SiLUMul(x, x, y); copy(y, x) }, func(x, y float64) float64 { return x / (1 + math.Exp(-x)) * y }},
		{"AxpyAlias", func(_, y []float32) { Axpy(alpha, y, y) }, func(_, y float64) float64 { return y + alpha*y }},
		{"AddAlias", func(_, y []float32) { Add(y, y) }, func(_, y float64) float64 { return 2 * y }},
	}
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, o := range ops {
			for _, n := range vectorLengths {
				x, y := randSlice(r, n), randSlice(r, n)
				for i := range x {
					x[i] *= 4 // exercise sigmoid tails
				}
				x0, y0 := append([]float32(nil), x...), append([]float32(nil), y...)
				o.run(x, y)
				for i := range y {
					want := o.want(float64(x0[i]), float64(y0[i]))
					scale := math.Abs(want) + math.Abs(float64(y0[i]))
					if !within(y[i], want, scale, 4e-6) {
						t.Fatalf("%s n=%d i=%d: got %v want %v", o.name, n, i, y[i], want)
					}
				}
			}
		}
	})
}

func TestSiLUMulExtremes(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		g := []float32{-200, -100, -90, -88, -87, -50, -10, -1e-3, 0, 1e-3, 10, 50, 87, 88, 90, 100, 200}
		up := make([]float32, len(g))
		for i := range up {
			up[i] = 1.5
		}
		out := make([]float32, len(g))
		SiLUMul(out, g, up)
		for i, v := range g {
			want := float64(v) / (1 + math.Exp(-float64(v))) * 1.5
			if !within(out[i], want, math.Abs(want), 4e-6) && math.Abs(want) > 1e-30 {
				t.Errorf("SiLUMul(%v)=%v want %v", v, out[i], want)
			}
		}
	})
}

func TestRMSNorm(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, n := range vectorLengths[1:] {
			for _, inPlace := range []bool{false, true} {
				x, w := randSlice(r, n), randSlice(r, n)
				x0 := append([]float32(nil), x...)
				out := make([]float32, n)
				if inPlace {
					out = x
				}
				const eps = 1e-5
				RMSNorm(out, x, w, eps)
				var ss float64
				for _, v := range x0 {
					ss += float64(v) * float64(v)
				}
				s := 1 / math.Sqrt(ss/float64(n)+eps)
				for i := range out {
					want := float64(x0[i]) * s * float64(w[i])
					if !within(out[i], want, math.Abs(want), 2e-6) {
						t.Fatalf("n=%d inPlace=%v i=%d: got %v want %v", n, inPlace, i, out[i], want)
					}
				}
			}
		}
	})
}

// TestExpSubKernels checks ExpSub with each kernel implementation over
// every vector length and a range of spreads, with m = max(x) as a softmax
// passes it and one element masked with -Inf.
func TestExpSubKernels(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 8))
		for _, n := range vectorLengths[1:] {
			for _, spread := range []float32{0.1, 5, 40} {
				x := randSlice(r, n)
				for i := range x {
					x[i] = x[i]*spread + 30
				}
				if n > 2 {
					x[1] = float32(math.Inf(-1))
				}
				x0 := append([]float32(nil), x...)
				mx := math.Inf(-1)
				for _, v := range x0 {
					mx = math.Max(mx, float64(v))
				}
				got := ExpSub(x, float32(mx))
				var sum float64
				for i, v := range x0 {
					want := math.Exp(float64(v) - mx)
					sum += want
					if !within(x[i], want, want, 1e-5) && want > 1e-30 {
						t.Fatalf("n=%d spread=%v i=%d: got %v want %v", n, spread, i, x[i], want)
					}
				}
				if !within(got, sum, sum, 1e-5) {
					t.Fatalf("n=%d spread=%v: sum %v, want %v", n, spread, got, sum)
				}
				if n > 2 && x[1] != 0 {
					t.Fatalf("n=%d: masked -Inf became %v, want 0", n, x[1])
				}
			}
		}
	})
}

func TestMaxIndex(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(9, 10))
		for _, n := range vectorLengths[1:] {
			x := randSlice(r, n)
			want := 0
			for i, v := range x {
				if v > x[want] {
					want = i
				}
			}
			if got := MaxIndex(x); got != want {
				t.Errorf("n=%d: MaxIndex=%d want %d", n, got, want)
			}
		}
		cases := []struct {
			x    []float32
			want int
		}{
			{[]float32{1, 3, 3, 2}, 1},
			{[]float32{nan, 1, 2, nan}, 2},
			{[]float32{nan, nan, nan}, 0},
			{[]float32{-inf, -inf}, 0},
			{[]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 1, inf, nan, inf, 0, 0}, 12},
			{append(make([]float32, 40), 5, 5), 40},
			{append(append(make([]float32, 20), nan), make([]float32, 20)...), 0},
		}
		for _, c := range cases {
			if got := MaxIndex(c.x); got != c.want {
				t.Errorf("MaxIndex(%v)=%d want %d", c.x, got, c.want)
			}
		}
	})
}

// refMatMul returns y0 + x·wᵀ in float64 and Σ|x||w| per element.
func refMatMul(y0, x, w []float32, m, k, n int) (want, scale []float64) {
	want = make([]float64, m*n)
	scale = make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, a float64
			for kk := range k {
				p := float64(x[i*k+kk]) * float64(w[j*k+kk])
				s += p
				a += math.Abs(p)
			}
			if y0 != nil {
				s += float64(y0[i*n+j])
				a += math.Abs(float64(y0[i*n+j]))
			}
			want[i*n+j], scale[i*n+j] = s, a
		}
	}
	return want, scale
}

func checkMatMulResult(t *testing.T, label string, y []float32, want, scale []float64) {
	t.Helper()
	for i := range y {
		if !within(y[i], want[i], scale[i], 2e-6) {
			t.Fatalf("%s: y[%d]=%v want %v (scale %v)", label, i, y[i], want[i], scale[i])
		}
	}
}

func TestMatMul(t *testing.T) {
	type shape struct{ m, k, n int }
	var shapes []shape
	for _, m := range []int{1, 2, 3, 4, 5, 6, 7, 13, 16, 17, 32, 33, 37, 50} {
		for _, k := range []int{1, 3, 7, 8, 16, 17, 33, 100, 257} {
			for _, n := range []int{1, 3, 7, 16, 17, 33, 50} {
				shapes = append(shapes, shape{m, k, n})
			}
		}
	}
	shapes = append(shapes,
		shape{0, 5, 5}, shape{5, 0, 5}, shape{5, 5, 0},
		shape{64, 300, 70},   // several kc blocks
		shape{500, 40, 33},   // several x blocks
		shape{97, 20, 40},    // x block boundary
		shape{7, 520, 1030},  // several w slabs per worker
		shape{1, 2048, 67},   // decode, long k
		shape{2, 1000, 1030}, // decode, two rows
		shape{3, 64, 4099},   // wide, like an LM head
		shape{20, 1100, 37},  // decode batch, several k blocks
	)
	pools := []*Pool{nil, NewPool(1), NewPool(3)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(11, 12))
		for _, s := range shapes {
			x, w := randSlice(r, s.m*s.k), randSlice(r, s.n*s.k)
			y0 := randSlice(r, s.m*s.n)
			want, scale := refMatMul(nil, x, w, s.m, s.k, s.n)
			wantAcc, scaleAcc := refMatMul(y0, x, w, s.m, s.k, s.n)
			for _, p := range pools {
				label := fmt.Sprintf("m=%d k=%d n=%d threads=%d", s.m, s.k, s.n, p.Threads())
				y := randSlice(r, s.m*s.n) // garbage that MatMul must overwrite
				MatMul(p, y, x, w, s.m, s.k, s.n)
				checkMatMulResult(t, "MatMul "+label, y, want, scale)
				copy(y, y0)
				MatMulAcc(p, y, x, w, s.m, s.k, s.n)
				checkMatMulResult(t, "MatMulAcc "+label, y, wantAcc, scaleAcc)
			}
		}
	})
}

func TestPanics(t *testing.T) {
	cases := []struct {
		name, want string
		f          func()
	}{
		{"MatMul w", "tensor.MatMul: len(w)=5 want n*k=6", func() { MatMul(nil, make([]float32, 6), make([]float32, 6), make([]float32, 5), 2, 3, 2) }},
		{"MatMul x", "tensor.MatMul: len(x)=5 want m*k=6", func() { MatMul(nil, make([]float32, 4), make([]float32, 5), make([]float32, 6), 2, 3, 2) }},
		{"MatMulAcc y", "tensor.MatMulAcc: len(y)=3 want m*n=4", func() { MatMulAcc(nil, make([]float32, 3), make([]float32, 6), make([]float32, 6), 2, 3, 2) }},
		{"MatMul negative", "tensor.MatMul: negative shape", func() { MatMul(nil, nil, nil, nil, -1, 0, 0) }},
		{"Dot", "tensor.Dot: len(a)=2 != len(b)=3", func() { Dot(make([]float32, 2), make([]float32, 3)) }},
		{"Axpy", "tensor.Axpy", func() { Axpy(1, make([]float32, 2), make([]float32, 3)) }},
		{"Add", "tensor.Add", func() { Add(make([]float32, 2), make([]float32, 3)) }},
		{"RMSNorm", "tensor.RMSNorm", func() { RMSNorm(make([]float32, 2), make([]float32, 2), make([]float32, 3), 1e-5) }},
		{"SiLUMul", "tensor.SiLUMul", func() { SiLUMul(make([]float32, 2), make([]float32, 3), make([]float32, 2)) }},
		{"MaxIndex", "tensor.MaxIndex: empty", func() { MaxIndex(nil) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.Contains(msg, c.want) {
					t.Errorf("panic %q, want it to contain %q", msg, c.want)
				}
			}()
			c.f()
		})
	}
}

func TestExpSub(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 16, 33} {
		x := make([]float32, n)
		want := 0.0
		for i := range x {
			x[i] = float32(i%5) - 3.5
			want += math.Exp(float64(x[i]) - 1.5)
		}
		orig := append([]float32(nil), x...)
		got := ExpSub(x, 1.5)
		if math.Abs(float64(got)-want) > 1e-5*math.Max(1, want) {
			t.Fatalf("n=%d: sum %v, want %v", n, got, want)
		}
		for i := range x {
			if e := math.Exp(float64(orig[i]) - 1.5); math.Abs(float64(x[i])-e) > 1e-6*e+1e-7 {
				t.Fatalf("n=%d x[%d] = %v, want %v", n, i, x[i], e)
			}
		}
	}
}

// TestMatMulOneRow holds the m = 1 product (one dot-product loop over a
// worker's rows of w) to dot, bit for bit, for MatMul and MatMulAcc, with
// k in whole vectors, with a tail and below one vector, and row counts
// that split unevenly over 3 threads and pass the accumulating loop's
// 64-row buffer.
func TestMatMulOneRow(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	pool := NewPool(3)
	defer pool.Close()
	forEachImpl(t, func(t *testing.T) {
		for _, k := range []int{768, 64, 8, 20, 5} {
			for _, n := range []int{1, 7, 64, 200} {
				x, w, y0 := randSlice(r, k), randSlice(r, n*k), randSlice(r, n)
				y := make([]float32, n)
				MatMul(pool, y, x, w, 1, k, n)
				ya := slices.Clone(y0)
				MatMulAcc(pool, ya, x, w, 1, k, n)
				for j := range n {
					d := dot(x, w[j*k:(j+1)*k])
					if y[j] != d || ya[j] != y0[j]+d {
						t.Fatalf("k=%d n=%d row %d: MatMul %v, MatMulAcc %v; dot %v (+%v)", k, n, j, y[j], ya[j], d, y0[j])
					}
				}
			}
		}
	})
}
