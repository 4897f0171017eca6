package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// nearestHalf is the reference narrowing: the value of bits h is val(h),
// monotonic in h over [0, inf]; it picks the nearest of the two neighbours
// of |f| (ties to the even one), treating inf as the next power of two
// after the largest finite value, which is IEEE 754's overflow rule.
func nearestHalf(f float32, inf uint16, val func(uint16) float32, next float64) uint16 {
	if f != f {
		return 0xffff // NaN: checked separately
	}
	sign := uint16(0)
	if math.Signbit(float64(f)) {
		sign = 0x8000
	}
	a := math.Abs(float64(f))
	v := func(h uint16) float64 {
		if h == inf {
			return next
		}
		return float64(val(h))
	}
	lo, hi := uint16(0), inf // largest h with v(h) <= a
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if v(mid) <= a {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == inf {
		return sign | inf
	}
	dlo, dhi := a-v(lo), v(lo+1)-a
	if dhi < dlo || dhi == dlo && lo&1 == 1 {
		lo++
	}
	return sign | lo
}

// halfCases are float32 bit patterns around the interesting boundaries of
// both formats plus random ones.
func halfCases() []float32 {
	var fs []float32
	for _, v := range []float32{0, 1, 1.5, 65504, 65519, 65520, 65535, 65536, 1e10,
		6.1035156e-05, 6.097555e-05, 5.9604645e-08, 2.9802322e-08, 2.9802326e-08, 1e-8, 1e-30,
		3.3895314e38, 3.3961775e38, math.MaxFloat32, math.SmallestNonzeroFloat32} {
		b := math.Float32bits(v)
		for d := uint32(0); d < 3; d++ {
			fs = append(fs, math.Float32frombits(b+d), math.Float32frombits(b-d), -math.Float32frombits(b+d))
		}
	}
	// Exact halfway points between neighbouring halves of both formats.
	for h := uint16(0); h < 0x7bff; h += 97 {
		fs = append(fs, float32((float64(FromF16(h))+float64(FromF16(h+1)))/2))
	}
	for h := uint16(0); h < 0x7f7f; h += 89 {
		fs = append(fs, float32((float64(FromBF16(h))+float64(FromBF16(h+1)))/2))
	}
	r := rand.New(rand.NewPCG(21, 22))
	for range 20000 {
		fs = append(fs, math.Float32frombits(r.Uint32()))
	}
	return fs
}

func TestHalfConversions(t *testing.T) {
	inf32 := float32(math.Inf(1))
	for _, f := range halfCases() {
		if f != f {
			if h := ToBF16(f); FromBF16(h) == FromBF16(h) {
				t.Fatalf("ToBF16(NaN %#x) = %#x, not NaN", math.Float32bits(f), h)
			}
			if h := ToF16(f); FromF16(h) == FromF16(h) {
				t.Fatalf("ToF16(NaN %#x) = %#x, not NaN", math.Float32bits(f), h)
			}
			continue
		}
		if f == inf32 || f == -inf32 {
			continue
		}
		if got, want := ToBF16(f), nearestHalf(f, 0x7f80, FromBF16, 0x1p128); got != want {
			t.Fatalf("ToBF16(%g) = %#x, want %#x", f, got, want)
		}
		if got, want := ToF16(f), nearestHalf(f, 0x7c00, FromF16, 65536); got != want {
			t.Fatalf("ToF16(%g) = %#x, want %#x", f, got, want)
		}
	}
	if ToF16(inf32) != 0x7c00 || ToF16(-inf32) != 0xfc00 || ToBF16(-inf32) != 0xff80 {
		t.Error("infinities do not narrow to infinities")
	}
	// Widening: every binary16 value, exact, and narrowing it back is the
	// identity.
	for h := range 1 << 16 {
		h := uint16(h)
		e, m := int(h>>10&0x1f), float64(h&0x3ff)
		var want float64
		switch e {
		case 0:
			want = m * 0x1p-24
		case 0x1f:
			want = math.Inf(1)
			if m != 0 {
				want = math.NaN()
			}
		default:
			want = (1 + m/1024) * math.Ldexp(1, e-15)
		}
		if h&0x8000 != 0 {
			want = -want
		}
		got := FromF16(h)
		if math.IsNaN(want) {
			if got == got {
				t.Fatalf("FromF16(%#x) = %v, want NaN", h, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("FromF16(%#x) = %v, want %v", h, got, want)
		}
		if back := ToF16(got); back != h {
			t.Fatalf("ToF16(FromF16(%#x)) = %#x", h, back)
		}
		if back := ToBF16(FromBF16(h)); back != h && FromBF16(h) == FromBF16(h) {
			t.Fatalf("ToBF16(FromBF16(%#x)) = %#x", h, back)
		}
	}
}

// TestDecodeKernels checks the vector widening and dequantizing kernels
// against the scalar conversions over every 16-bit pattern.
func TestDecodeKernels(t *testing.T) {
	all := make([]uint16, 1<<16+5) // a tail past whole vectors
	for i := range all {
		all[i] = uint16(i * 40503)
	}
	q := make([]uint8, 1000)
	for i := range q {
		q[i] = uint8(i * 7)
	}
	forEachImpl(t, func(t *testing.T) {
		got := make([]float32, len(all))
		same := func(name string, want func(int) float32) {
			for i, g := range got {
				w := want(i)
				if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
					t.Fatalf("%s[%d] = %v, want %v", name, i, g, w)
				}
			}
		}
		DecodeBF16(got, all)
		same("DecodeBF16", func(i int) float32 { return FromBF16(all[i]) })
		DecodeF16(got, all)
		same("DecodeF16", func(i int) float32 { return FromF16(all[i]) })
		for n := range 72 { // every mix of 32-, 16- and 8-wide steps and a tail
			src := all[1000 : 1000+n]
			for _, f := range []struct {
				name   string
				decode func([]float32, []uint16)
				one    func(uint16) float32
			}{{"DecodeBF16", DecodeBF16, FromBF16}, {"DecodeF16", DecodeF16, FromF16}} {
				dst := make([]float32, n+1)
				dst[n] = 7 // past the end: untouched
				f.decode(dst[:n], src)
				for i, g := range dst {
					w := float32(7)
					if i < n {
						w = f.one(src[i])
					}
					if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
						t.Fatalf("%s of %d: [%d] = %v, want %v", f.name, n, i, g, w)
					}
				}
			}
		}
		got = got[:len(q)]
		dequantQ8(got, q, 0.375)
		same("dequantQ8", func(i int) float32 { return float32(int(q[i])-128) * 0.375 })
	})
}

func TestQuantizeQ8_0(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	const n = 7
	for _, k := range []int{203, 32*q8Group + 37} { // one group; a whole one and a tail
		w := randSlice(r, n*k)
		for i := range 32 { // a zero block, a tiny one and a large one
			w[i], w[k+32+i], w[2*k+64+i] = 0, w[k+32+i]*1e-7, w[2*k+64+i]*3e3
		}
		w[3*k+5] = 1e-30
		nb := (k + 2*Q8Block - 1) / (2 * Q8Block) * 2
		groups := (nb + q8Group - 1) / q8Group
		for _, dt := range []DType{F32, BF16, F16} {
			src := makeWeights(dt, w, n, k)
			q := QuantizeQ8_0(NewPool(3), src)
			if q.DType() != Q8_0 || QuantizeQ8_0(nil, q) != q {
				t.Fatalf("%v: DType %v", dt, q.DType())
			}
			if got, want := q.Bytes(), n*(groups*64+nb*32); got != want {
				t.Errorf("%v k=%d: Bytes() = %d, want %d", dt, k, got, want)
			}
			rb := q.Bytes() / n
			orig, deq := make([]float32, k), make([]float32, k)
			for j := range n {
				row := q.q[j*rb : (j+1)*rb]
				src.Row(j, orig)
				q.Row(j, deq)
				for b := range nb {
					d := float64(q8Scale(row, b))
					_, qo := q8Pos(b)
					if b*Q8Block >= k {
						if d != 0 {
							t.Fatalf("%v k=%d row %d: padding block %d has scale %g", dt, k, j, b, d)
						}
					} else {
						xs := orig[b*Q8Block : min(k, (b+1)*Q8Block)]
						var amax float64
						for _, v := range xs {
							amax = math.Max(amax, math.Abs(float64(v)))
						}
						if d < amax/127 || d > amax/127*(1+1.0/1024)+0x1p-24 {
							t.Fatalf("%v k=%d row %d block %d: scale %g for max %g", dt, k, j, b, d, amax)
						}
						for i, v := range xs {
							c := b*Q8Block + i
							if e := math.Abs(float64(v) - float64(deq[c])); e > 0.50002*d {
								t.Fatalf("%v k=%d row %d col %d: %g dequantizes to %g (scale %g)", dt, k, j, c, v, deq[c], d)
							}
						}
					}
					for i := max(0, k-b*Q8Block); i < Q8Block; i++ {
						if row[qo+i] != 128 {
							t.Fatalf("%v k=%d row %d: padding quant %d of block %d is %d", dt, k, j, i, b, row[qo+i])
						}
					}
				}
				for b := nb; b < groups*q8Group; b++ { // unused header entries
					if s, _ := q8Pos(b); row[s] != 0 || row[s+1] != 0 {
						t.Fatalf("%v k=%d row %d: header entry %d is set", dt, k, j, b)
					}
				}
			}
		}
	}
}

// TestQuantizeQ8Row checks each kernel set's weight quantizer against the
// portable one, byte for byte, on blocks that are zero, tiny (subnormal
// binary16 scales), huge (saturated scales), at rounding ties, and on a
// partial last block and padding.
func TestQuantizeQ8Row(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	for _, k := range []int{5, 64, 100, 32*q8Group + 40, 70 * 32} {
		src := randSlice(r, k)
		for b := 0; b*Q8Block < k; b++ {
			blk := src[b*Q8Block : min(k, (b+1)*Q8Block)]
			for i := range blk {
				switch b % 5 {
				case 1:
					blk[i] = 0
				case 2:
					blk[i] *= 1e-9
				case 3:
					blk[i] *= 1e9
				case 4:
					blk[i] = float32(i%7-3) * 0.25
				}
			}
		}
		nb := q8Blocks(k)
		want := make([]uint8, q8RowBytes(nb))
		quantizeQ8RowGo(want, nb, src, 0)
		forEachImpl(t, func(t *testing.T) {
			got := make([]uint8, len(want))
			quantizeQ8Row(got, nb, src)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("k=%d: byte %d = %d, want %d", k, i, got[i], want[i])
				}
			}
		})
	}
}

// TestQuantizeAct checks each kernel set's activation quantizer against
// the portable one, bit for bit: quants, scales and corrections.
func TestQuantizeAct(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, k := range []int{1, 31, 32, 33, 64, 100, 1000} {
		x := randSlice(r, k)
		for i := range min(k, 32) {
			x[i] = 0 // a zero block
		}
		if k > 40 {
			for i := 32; i < 64 && i < k; i++ {
				x[i] = float32(i%5-2) * 0.5 // quants at exact ties: ±63.5, ±127
			}
		}
		nb := q8Blocks(k) + 1
		want := getQ8Act(1, nb)
		quantizeActGo(want.q, want.c, want.d, x)
		forEachImpl(t, func(t *testing.T) {
			got := &q8Act{make([]int8, nb*Q8Block), make([]int32, nb), make([]float32, nb)}
			for i := range got.q {
				got.q[i] = 99 // garbage that must be overwritten
			}
			quantizeAct(got.q, got.c, got.d, x)
			for i := range want.q {
				if got.q[i] != want.q[i] {
					t.Fatalf("k=%d: q[%d]=%d want %d", k, i, got.q[i], want.q[i])
				}
			}
			for b := range nb {
				if got.d[b] != want.d[b] || got.c[b] != want.c[b] {
					t.Fatalf("k=%d block %d: d, c = %v, %d want %v, %d", k, b, got.d[b], got.c[b], want.d[b], want.c[b])
				}
			}
		})
		q8ActPool.Put(want)
	}
}

// makeWeights stores the float32 matrix w as dt (quantizing for Q8_0).
func makeWeights(dt DType, w []float32, n, k int) *Weights {
	switch dt {
	case BF16:
		h := make([]uint16, len(w))
		EncodeBF16(h, w)
		return NewWeightsBF16(h, n, k)
	case F16:
		h := make([]uint16, len(w))
		EncodeF16(h, w)
		return NewWeightsF16(h, n, k)
	case Q8_0:
		return QuantizeQ8_0(nil, NewWeightsF32(w, n, k))
	}
	return NewWeightsF32(w, n, k)
}

// refMatMulW returns y0 + x·wᵀ in float64 for the weights as stored
// (widened or dequantized exactly), Σ|x·w| per element, and for Q8_0 at
// m <= gemvMaxM the same two for x quantized as the kernels quantize it,
// plus the bound Σ|w|·d_x/2 on what that quantization changes.
type refW struct {
	m                     int
	want, scale           []float64
	qwant, qscale, qbound []float64
}

func refMatMulW(y0, x []float32, w *Weights, m int) refW {
	n, k := w.Shape()
	wf := make([]float32, n*k)
	for j := range n {
		w.Row(j, wf[j*k:(j+1)*k])
	}
	r := refW{m: m}
	if w.DType() == BF16 {
		x = bf16Rounded(x) // MatMulW's input to BF16 weights
	}
	r.want, r.scale = refMatMul(y0, x, wf, m, k, n)
	if w.DType() != Q8_0 {
		return r
	}
	nb := q8ActBlocks(w.nb)
	xq := make([]float32, m*k)
	dx := make([]float32, m*nb)
	for i := range m {
		a := getQ8Act(1, nb)
		quantizeAct(a.q, a.c, a.d, x[i*k:(i+1)*k])
		for c := range k {
			xq[i*k+c] = float32(a.q[c]) * a.d[c/Q8Block]
		}
		copy(dx[i*nb:], a.d)
	}
	r.qwant, r.qscale = refMatMul(y0, xq, wf, m, k, n)
	r.qbound = make([]float64, m*n)
	for i := range m {
		for j := range n {
			var b float64
			for c := range k {
				b += math.Abs(float64(wf[j*k+c])) * float64(dx[i*nb+c/Q8Block]) / 2
			}
			r.qbound[i*n+j] = b
		}
	}
	return r
}

// bf16Rounded returns x with each element rounded to bfloat16.
func bf16Rounded(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = FromBF16(ToBF16(v))
	}
	return out
}

// checkW checks y against a reference: within rel·scale of want, and for
// Q8_0 products that quantize x (decode, and prefill by int8 tiles: see
// q8Tile) also within rel·scale of the quantized-activation reference and
// within the activation-rounding bound of the exact one.
func checkW(t *testing.T, label string, y []float32, r refW, rel float64) {
	t.Helper()
	quantized := r.qwant != nil && (r.m <= gemvMaxM || q8Tile() != nil)
	for i, v := range y {
		if !quantized {
			if !within(v, r.want[i], r.scale[i], rel) {
				t.Fatalf("%s: y[%d]=%v want %v (scale %v)", label, i, v, r.want[i], r.scale[i])
			}
			continue
		}
		if !within(v, r.qwant[i], r.qscale[i], rel) {
			t.Fatalf("%s: y[%d]=%v want %v with x quantized (scale %v)", label, i, v, r.qwant[i], r.qscale[i])
		}
		if e := math.Abs(float64(v) - r.want[i]); e > r.qbound[i]*(1+1e-5)+rel*r.scale[i] {
			t.Fatalf("%s: y[%d]=%v is %g from the exact %v, beyond the bound %g", label, i, v, e, r.want[i], r.qbound[i])
		}
	}
}

// lowpTol is the relative tolerance (times Σ|x·w|) of MatMulW against the
// float64 product of the weights as stored: float32 accumulation, plus for
// Q8_0 one rounding of each block's scale product.
var lowpTol = map[DType]float64{F32: 2e-6, BF16: 2e-6, F16: 2e-6, Q8_0: 4e-6}

func TestMatMulW(t *testing.T) {
	type shape struct{ m, k, n int }
	var shapes []shape
	for _, m := range []int{1, 2, 5, 33} {
		for _, k := range []int{1, 7, 16, 33, 64, 100, 513, 1100} {
			for _, n := range []int{1, 3, 9, 17} {
				shapes = append(shapes, shape{m, k, n})
			}
		}
	}
	shapes = append(shapes,
		shape{0, 5, 5}, shape{5, 0, 5}, shape{5, 5, 0},
		shape{1, 1024, 70}, shape{4, 600, 21}, shape{32, 97, 35},
		shape{100, 300, 40}, shape{100, 33, 530}, shape{40, 1030, 20},
		shape{1, halfRowKMax + 19, 13}, shape{1, 2 * halfRowKMax, 9}, // four rows a pass
		shape{7, 4196, 13},  // BF16 pairs: three k blocks, a tail, the last four rows again
		shape{37, 4196, 70}) // BF16 GEMM: three slabs, edge tiles both ways
	pools := []*Pool{nil, NewPool(1), NewPool(3)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	r := rand.New(rand.NewPCG(25, 26))
	type tcase struct {
		s        shape
		w        *Weights
		x, y0    []float32
		ref, acc refW
	}
	var cases []tcase
	for _, dt := range []DType{BF16, F16, Q8_0} {
		for _, s := range shapes {
			w := makeWeights(dt, randSlice(r, s.n*s.k), s.n, s.k)
			x, y0 := randSlice(r, s.m*s.k), randSlice(r, s.m*s.n)
			cases = append(cases, tcase{s, w, x, y0, refMatMulW(nil, x, w, s.m), refMatMulW(y0, x, w, s.m)})
		}
	}
	forEachImpl(t, func(t *testing.T) {
		for _, c := range cases {
			s, dt := c.s, c.w.DType()
			for _, p := range pools {
				label := fmt.Sprintf("%v m=%d k=%d n=%d threads=%d", dt, s.m, s.k, s.n, p.Threads())
				y := randSlice(r, s.m*s.n)
				MatMulW(p, y, c.x, c.w, s.m)
				checkW(t, "MatMulW "+label, y, c.ref, lowpTol[dt])
				copy(y, c.y0)
				MatMulWAcc(p, y, c.x, c.w, s.m)
				checkW(t, "MatMulWAcc "+label, y, c.acc, lowpTol[dt])
			}
		}
	})
}

// TestMatMulWImplsAgree runs every kernel set on the same products and
// compares each with the portable one.
func TestMatMulWImplsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	const k, n = 777, 45
	for _, dt := range []DType{BF16, F16, Q8_0} {
		w := makeWeights(dt, randSlice(r, n*k), n, k)
		for _, m := range []int{1, 3, 40} {
			x := randSlice(r, m*k)
			ref := refMatMulW(nil, x, w, m)
			scale := ref.scale
			if ref.qscale != nil {
				scale = ref.qscale
			}
			// Q8_0 prefill quantizes x only under some kernel sets
			// (q8Tile); those that do are compared with each other.
			bases := map[bool][]float32{}
			forEachImpl(t, func(t *testing.T) {
				y := make([]float32, m*n)
				MatMulW(nil, y, x, w, m)
				kind := dt == Q8_0 && m > gemvMaxM && q8Tile() == nil
				base := bases[kind]
				if base == nil {
					bases[kind] = y
					return
				}
				for i := range y {
					if !within(y[i], float64(base[i]), scale[i], 2*lowpTol[dt]) {
						t.Fatalf("%v m=%d: y[%d]=%v, portable %v", dt, m, i, y[i], base[i])
					}
				}
			})
		}
	}
}

// TestMatMulWConcurrent shares one pool and one set of weights between
// goroutines, as model ranks do, each checking its own products.
func TestMatMulWConcurrent(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	r := rand.New(rand.NewPCG(35, 36))
	const k, n = 300, 37
	var ws []*Weights
	for _, dt := range []DType{BF16, F16, Q8_0} {
		ws = append(ws, makeWeights(dt, randSlice(r, n*k), n, k))
	}
	type job struct {
		w    *Weights
		m    int
		x    []float32
		want []float32
	}
	var jobs []job
	for _, w := range ws {
		for _, m := range []int{1, 3, 40} {
			x := randSlice(r, m*k)
			want := make([]float32, m*n)
			MatMulW(nil, want, x, w, m)
			jobs = append(jobs, job{w, m, x, want})
		}
	}
	done := make(chan string)
	for g := range 4 {
		go func() {
			msg := ""
			for it := range 3 * len(jobs) {
				j := jobs[(it+g)%len(jobs)]
				y := make([]float32, j.m*n)
				MatMulW(p, y, j.x, j.w, j.m)
				for i := range y {
					if !within(y[i], float64(j.want[i]), math.Abs(float64(j.want[i]))+1, 1e-5) {
						msg = fmt.Sprintf("goroutine %d: %v m=%d y[%d]=%v want %v", g, j.w.DType(), j.m, i, y[i], j.want[i])
					}
				}
			}
			done <- msg
		}()
	}
	for range 4 {
		if msg := <-done; msg != "" {
			t.Error(msg)
		}
	}
}

// TestMatMulWF32 checks that F32 weights are MatMul, bit for bit.
func TestMatMulWF32(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	for _, m := range []int{1, 7, 50} {
		const k, n = 65, 19
		x, wf := randSlice(r, m*k), randSlice(r, n*k)
		want, got := make([]float32, m*n), make([]float32, m*n)
		MatMul(nil, want, x, wf, m, k, n)
		MatMulW(nil, got, x, NewWeightsF32(wf, n, k), m)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("m=%d: y[%d]=%v, MatMul %v", m, i, got[i], want[i])
			}
		}
	}
}

// TestQ8NoOverflow drives the Q8_0 block sums to their extremes at
// k = 16384: every quant ±127 on both sides, every block's integer dot
// product 32·127² with the signs aligned or opposed.
func TestQ8NoOverflow(t *testing.T) {
	const k, n = 16384, 2
	w := make([]float32, n*k)
	x := make([]float32, k)
	for c := range k {
		x[c] = 1
		w[c] = 1
		w[k+c] = -1
	}
	q := QuantizeQ8_0(nil, NewWeightsF32(w, n, k))
	// Every weight dequantizes to ±127·d_w and every x to 127·d_x.
	want := float64(k) * 127 * float64(q8Scale(q.q, 0)) * 127 * float64(float32(1)/127)
	forEachImpl(t, func(t *testing.T) {
		y := make([]float32, n)
		MatMulW(nil, y, x, q, 1)
		if math.Abs(float64(y[0])-want) > 1e-5*want || math.Abs(float64(y[1])+want) > 1e-5*want {
			t.Fatalf("y = %v, want ±%v", y, want)
		}
	})
}

func TestWeightsPanics(t *testing.T) {
	w := NewWeightsBF16(make([]uint16, 6), 2, 3)
	cases := []struct {
		name, want string
		f          func()
	}{
		{"NewWeightsBF16", "tensor.NewWeightsBF16: len(w)=5", func() { NewWeightsBF16(make([]uint16, 5), 2, 3) }},
		{"NewWeightsF16", "tensor.NewWeightsF16", func() { NewWeightsF16(make([]uint16, 5), 2, 3) }},
		{"NewWeightsF32", "tensor.NewWeightsF32", func() { NewWeightsF32(make([]float32, 5), 2, 3) }},
		{"MatMulW x", "tensor.MatMulW: len(x)=5 want m*k=6", func() { MatMulW(nil, make([]float32, 4), make([]float32, 5), w, 2) }},
		{"MatMulWAcc y", "tensor.MatMulWAcc: len(y)=3 want m*n=4", func() { MatMulWAcc(nil, make([]float32, 3), make([]float32, 6), w, 2) }},
		{"MatMulW m", "tensor.MatMulW: negative m", func() { MatMulW(nil, nil, nil, w, -1) }},
		{"Row", "tensor.Weights.Row: row 2 of 2", func() { w.Row(2, make([]float32, 3)) }},
		{"DecodeBF16", "tensor.DecodeBF16", func() { DecodeBF16(make([]float32, 2), make([]uint16, 3)) }},
		{"EncodeF16", "tensor.EncodeF16", func() { EncodeF16(make([]uint16, 2), make([]float32, 3)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.Contains(msg, c.want) {
					t.Errorf("panic %q, want it to contain %q", msg, c.want)
				}
			}()
			c.f()
		})
	}
	for dt, s := range map[DType]string{F32: "f32", BF16: "bf16", F16: "f16", Q8_0: "q8_0", 9: "DType(9)"} {
		if dt.String() != s {
			t.Errorf("DType %d String %q, want %q", dt, dt.String(), s)
		}
	}
}

// TestMatMulWs checks that projections of one x computed together equal
// MatMulW's one at a time, to the bit: each output row is computed by the
// same kernel over the same row group wherever the fused job's chunk
// boundaries fall (k stays within halfRowKMax, where the half-precision
// m = 1 kernel takes one row at a time). Shapes that do not fuse (m = 0,
// m > gemvMaxM, a single projection) take MatMulW's path.
func TestMatMulWs(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	const k = 200
	ns := []int{37, 8, 13}
	for _, dt := range []DType{F32, BF16, F16, Q8_0} {
		ws := make([]*Weights, len(ns))
		for i, n := range ns {
			ws[i] = makeWeights(dt, randSlice(r, n*k), n, k)
		}
		for _, m := range []int{0, 1, 2, 5, gemvMaxM, gemvMaxM + 1} {
			x := randSlice(r, m*k)
			for threads := 1; threads <= 3; threads++ {
				p := NewPool(threads)
				for _, use := range [][]int{{0, 1, 2}, {1}, {2, 0}} {
					ps := make([]Projection, len(use))
					for i, u := range use {
						ps[i] = Projection{Y: randSlice(r, m*ns[u]), W: ws[u]}
					}
					MatMulWs(p, x, m, ps...)
					for i, u := range use {
						want := make([]float32, m*ns[u])
						MatMulW(p, want, x, ws[u], m)
						for e := range want {
							if ps[i].Y[e] != want[e] {
								t.Fatalf("%v m=%d threads=%d projections %v: W%d y[%d]=%v, MatMulW %v", dt, m, threads, use, u, e, ps[i].Y[e], want[e])
							}
						}
					}
				}
				p.Close()
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MatMulWs accepted a y of the wrong length")
		}
	}()
	MatMulWs(nil, make([]float32, k), 1, Projection{Y: make([]float32, 3), W: NewWeightsF32(make([]float32, 4*k), 4, k)})
}

// TestScoresAxpyRows checks Scores against Dot for every query and key,
// and bit for bit against its general dot-tile path (the fast path for
// k a multiple of 16 must call the same kernels in the same order), and
// AxpyRows against Axpy row by row (bit for bit), over query counts that
// cross the quads, pairs and the 32-row pass, key counts that leave a
// tail of fewer than 4, and key and value rows back to back or further
// TestScoresRowIndependent: each score is the same bit for bit whatever
// m and n and the row's and key's places (what makes attention's result
// for a query the same alone or in a block, over any tiles), for every
// kernel set, for k whole
// quads of the AVX-512 kernel, with a tail of 8 or more (which its
// one-row counterpart must leave to dotGo as the quads do) and below one
// vector, over both the assembly path (m ≤ 32) and the tiles (m > 32).
func TestScoresRowIndependent(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(43, 44))
		for _, k := range []int{64, 128, 24, 40, 70, 8, 5} {
			const n, rows = 9, 40
			x, w := randSlice(r, rows*k), randSlice(r, n*k)
			alone := make([]float32, rows*n)
			for i := range rows {
				Scores(alone[i*n:(i+1)*n], x[i*k:(i+1)*k], w, 1, n, k, k)
			}
			for _, m := range []int{2, 3, 4, 5, 7, 8, 33, 40} {
				for _, at := range []int{0, min(1, rows-m), rows - m} {
					s := make([]float32, m*n)
					Scores(s, x[at*k:(at+m)*k], w, m, n, k, k)
					for i := range s {
						if math.Float32bits(s[i]) != math.Float32bits(alone[at*n+i]) {
							t.Fatalf("k=%d m=%d from row %d: s[%d]=%v, the row alone %v", k, m, at, i, s[i], alone[at*n+i])
						}
					}
				}
			}
			// Nor on the keys beside it: any window of the keys.
			for _, win := range [][2]int{{0, 1}, {2, 5}, {3, 9}, {5, 8}, {1, 6}, {8, 9}} {
				j0, nw := win[0], win[1]-win[0]
				for _, m := range []int{1, 5, 40} {
					s := make([]float32, m*nw)
					Scores(s, x[:m*k], w[j0*k:], m, nw, k, k)
					for i := range m {
						for c := range nw {
							if got, want := s[i*nw+c], alone[i*n+j0+c]; math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("k=%d m=%d keys [%d,%d): row %d key %d is %v, among all keys %v", k, m, win[0], win[1], i, j0+c, got, want)
							}
						}
					}
				}
			}
		}
	})
}

// apart (ldw > k).
func TestScoresAxpyRows(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, k := range []int{64, 128, 70, 8, 5} {
		for _, pad := range []int{0, 3, 64} {
			ldw := k + pad
			for _, m := range []int{1, 2, 3, 4, 5, 7, 8, 32, 33} {
				for _, n := range []int{1, 4, 6, 16, 19} {
					x, w := randSlice(r, m*k), randSlice(r, (n-1)*ldw+k)
					s, tiles := make([]float32, m*n), make([]float32, m*n)
					Scores(s, x, w, m, n, k, ldw)
					scores(tiles, x, w, m, n, k, ldw)
					for i := range s {
						if math.Float32bits(s[i]) != math.Float32bits(tiles[i]) {
							t.Fatalf("k=%d ldw=%d m=%d n=%d: Scores s[%d]=%v, the dot-tile path %v", k, ldw, m, n, i, s[i], tiles[i])
						}
					}
					for i := range m {
						for j := range n {
							want := Dot(x[i*k:(i+1)*k], w[j*ldw:j*ldw+k])
							if math.Abs(float64(s[i*n+j]-want)) > 1e-5*(1+math.Abs(float64(want))) {
								t.Fatalf("k=%d ldw=%d m=%d n=%d: s[%d,%d]=%v, Dot %v", k, ldw, m, n, i, j, s[i*n+j], want)
							}
						}
					}
					a := randSlice(r, n)
					y, want := randSlice(r, k), make([]float32, k)
					copy(want, y)
					AxpyRows(y, a, w, ldw)
					for j := range n {
						Axpy(a[j], w[j*ldw:j*ldw+k], want)
					}
					for i := range y {
						if y[i] != want[i] {
							t.Fatalf("k=%d ldw=%d n=%d: AxpyRows y[%d]=%v, Axpy row by row %v", k, ldw, n, i, y[i], want[i])
						}
					}
				}
			}
		}
	}
}
