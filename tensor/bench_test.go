package tensor

import (
	"fmt"
	"testing"
)

// benchThreads is the pool size of every benchmark: the two cores of the
// reference machine.
const benchThreads = 2

// fill writes a cheap deterministic pattern in [-1, 1).
func fill(s []float32, seed uint32) {
	x := seed*2654435761 + 1
	for i := range s {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		s[i] = float32(int32(x)) / (1 << 31)
	}
}

func benchMatMul(b *testing.B, p *Pool, m, k, n int) {
	x, w, y := make([]float32, m*k), make([]float32, n*k), make([]float32, m*n)
	fill(x, 1)
	fill(w, 2)
	MatMul(p, y, x, w, m, k, n) // warm caches, page in w
	b.ResetTimer()
	for b.Loop() {
		MatMul(p, y, x, w, m, k, n)
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(2*float64(m)*float64(k)*float64(n)/sec/1e9, "GFLOP/s")
	if m <= 16 {
		b.ReportMetric(4*float64(n)*float64(k)/sec/1e9, "GB/s")
	}
}

// BenchmarkMatMul reports GFLOP/s (2·m·k·n per op) and, for decode-sized m,
// the rate at which w is read in GB/s.
func BenchmarkMatMul(b *testing.B) {
	p := NewPool(benchThreads)
	defer p.Close()
	shapes := []struct{ m, k, n int }{
		{1, 2048, 2048}, {16, 2048, 2048}, {256, 2048, 2048},
		{1, 8192, 2048}, {256, 8192, 2048}, {1, 2048, 128256},
	}
	for _, s := range shapes {
		name := fmt.Sprintf("M=%d", s.m)
		if s.k != 2048 || s.n != 2048 {
			name = fmt.Sprintf("M=%d/K=%d/N=%d", s.m, s.k, s.n)
		}
		b.Run(name, func(b *testing.B) { benchMatMul(b, p, s.m, s.k, s.n) })
	}
}

// BenchmarkStream measures memory bandwidth with the same pool over three
// 128 MiB arrays (384 MiB in all), counting bytes read plus written as
// STREAM does: copy c=a, triad a=b+s·c, and read (a dot product, the access
// pattern of a decode GEMV).
func BenchmarkStream(b *testing.B) {
	p := NewPool(benchThreads)
	defer p.Close()
	const n = 32 << 20
	a, bb, c := make([]float32, n), make([]float32, n), make([]float32, n)
	fill(a, 1)
	fill(bb, 2)
	fill(c, 3)
	const chunk = 1 << 16
	kernels := []struct {
		name  string
		bytes int
		run   func(lo, hi int)
	}{
		{"copy", 2 * 4 * n, func(lo, hi int) { copy(c[lo:hi], a[lo:hi]) }},
		{"triad", 3 * 4 * n, func(lo, hi int) {
			a, bb, c := a[lo:hi], bb[lo:hi], c[lo:hi]
			for i := range a {
				a[i] = bb[i] + 0.5*c[i]
			}
		}},
		{"read", 2 * 4 * n, func(lo, hi int) { _ = Dot(a[lo:hi], bb[lo:hi]) }},
	}
	for _, kn := range kernels {
		b.Run(kn.name, func(b *testing.B) {
			run := func() {
				p.Run(n/chunk, func(lo, hi int) { kn.run(lo*chunk, hi*chunk) })
			}
			run()
			b.ResetTimer()
			for b.Loop() {
				run()
			}
			b.ReportMetric(float64(kn.bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// BenchmarkDot times batches of dotBatch in-cache dot products per op, so
// that even -benchtime 2x measures something; it reports GFLOP/s.
func BenchmarkDot(b *testing.B) {
	const dotBatch = 1024
	for _, n := range []int{256, 4096} {
		x, y := make([]float32, n), make([]float32, n)
		fill(x, 1)
		fill(y, 2)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var s float32
			for b.Loop() {
				for range dotBatch {
					s += Dot(x, y)
				}
			}
			b.ReportMetric(2*dotBatch*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			_ = s
		})
	}
}
