package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// bf16KernelGo is the pair micro-kernel in plain Go, the reference of
// the assembly one.
func bf16KernelGo(kp int, a []uint32, lda int, b []uint32, c []float32, ldc int, acc bool) {
	var t [bfMR][bfNR]float32
	for r := range bfMR {
		ar := a[r*lda : r*lda+kp]
		for kk, av := range ar {
			alo, ahi := FromBF16(uint16(av)), FromBF16(uint16(av>>16))
			for j := range bfNR {
				bv := b[(j/16)*16*kp+kk*16+j%16]
				t[r][j] += alo*FromBF16(uint16(bv)) + ahi*FromBF16(uint16(bv>>16))
			}
		}
	}
	for r := range bfMR {
		row := c[r*ldc : r*ldc+bfNR]
		for j := range row {
			if acc {
				row[j] += t[r][j]
			} else {
				row[j] = t[r][j]
			}
		}
	}
}

// randPairs returns n pairs of random bfloat16 in [-1, 1).
func randPairs(r *rand.Rand, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = pairBF16(2*r.Float32()-1, 2*r.Float32()-1)
	}
	return p
}

// TestBF16Kernel: the assembly pair kernel against bf16KernelGo, over
// depths around its unrolling by four, with strided rows of a and c and
// with and without accumulation, within float32 rounding of Σ|a·b|.
func TestBF16Kernel(t *testing.T) {
	kern := bf16Kernel()
	if kern == nil {
		t.Skip("no bfloat16 pair instruction on this CPU (AVX-512 BF16)")
	}
	r := rand.New(rand.NewPCG(41, 42))
	for _, kp := range []int{1, 2, 3, 4, 5, 8, 17, 128} {
		for _, acc := range []bool{false, true} {
			lda, ldc := kp+3, bfNR+5
			a, b := randPairs(r, bfMR*lda), randPairs(r, bfNR*kp)
			c0 := randSlice(r, bfMR*ldc)
			got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
			kern(kp, a, lda, b, got, ldc, acc)
			bf16KernelGo(kp, a, lda, b, want, ldc, acc)
			for i := range bfMR {
				for j := range ldc {
					g, w := got[i*ldc+j], want[i*ldc+j]
					if j >= bfNR {
						if g != c0[i*ldc+j] {
							t.Fatalf("kp=%d: c[%d][%d] past the tile was written", kp, i, j)
						}
						continue
					}
					if math.Abs(float64(g-w)) > 1e-6*float64(2*kp+1) {
						t.Fatalf("kp=%d acc=%v: c[%d][%d] = %v, want %v", kp, acc, i, j, g, w)
					}
				}
			}
		}
	}
}

// TestGEMMBF16Portable runs gemmBF16's blocking, packing and edge tiles
// with the Go kernel, on any CPU, against the float64 product of x
// rounded to bfloat16.
func TestGEMMBF16Portable(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	p := NewPool(3)
	defer p.Close()
	for _, s := range []struct{ m, k, n int }{{12, 2, 32}, {13, 7, 33}, {40, 257, 530}, {100, 1100, 17}, {33, 256, 64}, {37, 4196, 70}} {
		w := makeWeights(BF16, randSlice(r, s.n*s.k), s.n, s.k)
		x := randSlice(r, s.m*s.k)
		for _, acc := range []bool{false, true} {
			y0 := randSlice(r, s.m*s.n)
			ref := refMatMulW(nil, x, w, s.m)
			if acc {
				ref = refMatMulW(y0, x, w, s.m)
			}
			y := append([]float32(nil), y0...)
			gemmBF16(p, y, x, w, s.m, acc, bf16KernelGo)
			checkW(t, fmt.Sprintf("gemmBF16 m=%d k=%d n=%d acc=%v", s.m, s.k, s.n, acc), y, ref, lowpTol[BF16])
		}
	}
}

// BenchmarkGEMMBF16 reports GFLOP/s (2·m·k·n) of BF16 products large
// enough for gemmBF16, the shapes of BenchmarkMatMulWPrefill.
func BenchmarkGEMMBF16(b *testing.B) {
	p := NewPool(benchThreads)
	defer p.Close()
	const m = 512
	for _, s := range []struct{ k, n int }{{2048, 2048}, {8192, 2048}, {2048, 8192}} {
		b.Run(fmt.Sprintf("M=%d/K=%d/N=%d", m, s.k, s.n), func(b *testing.B) {
			wf := make([]float32, s.n*s.k)
			fill(wf, 2)
			x, y := make([]float32, m*s.k), make([]float32, m*s.n)
			fill(x, 1)
			w := makeWeights(BF16, wf, s.n, s.k)
			MatMulW(p, y, x, w, m)
			for b.Loop() {
				MatMulW(p, y, x, w, m)
			}
			b.ReportMetric(2*float64(m*s.k*s.n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// TestPairsBF16: the vector rounding into pairs equals pairBF16 on every
// float (random bit patterns, ties, infinities, NaNs, values that round
// up to infinity), except that denormals become zero of the same sign.
func TestPairsBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	src := make([]float32, 2*4096)
	for i := range src {
		src[i] = math.Float32frombits(r.Uint32())
	}
	special := []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff,
		0x3f808000, 0x3f818000, 0x3f80ffff, 0x7f7fffff, 0xff7fffff, 0x00000001, 0x807fffff, 0x00800000}
	for i, b := range special {
		src[i] = math.Float32frombits(b)
	}
	dst := make([]uint32, len(src)/2)
	n := pairsAsm(dst, src)
	if n == 0 {
		t.Skip("no vector bfloat16 rounding on this CPU (AVX-512 BF16)")
	}
	if n != len(dst) {
		t.Fatalf("pairsAsm did %d of %d pairs", n, len(dst))
	}
	for i, got := range dst {
		lo, hi := src[2*i], src[2*i+1]
		for _, v := range []*float32{&lo, &hi} {
			if b := math.Float32bits(*v); b&0x7f800000 == 0 {
				*v = math.Float32frombits(b & 0x80000000)
			}
		}
		if want := pairBF16(lo, hi); got != want {
			t.Fatalf("pair %d of %#x, %#x: %#x, want %#x", i, math.Float32bits(src[2*i]), math.Float32bits(src[2*i+1]), got, want)
		}
	}
}
