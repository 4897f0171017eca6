package tensor

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkMatMulWPrefillQ8 times Q8_0 products at prefill shapes (m =
// 512 on the 1B model's projections), interleaving the int8 tiles of
// MatMulW (gemmQ8) with the float32 GEMM on dequantized panels (gemmW,
// the path it replaced), and reports each in GOP/s (2·m·k·n per product)
// and their ratio.
func BenchmarkMatMulWPrefillQ8(b *testing.B) {
	p := NewPool(benchThreads)
	defer p.Close()
	const m = 512
	tile := q8Tile()
	if tile == nil {
		b.Skip("Q8_0 prefill runs gemmW on this CPU")
	}
	for _, s := range []struct{ k, n int }{{2048, 2048}, {2048, 8192}, {8192, 2048}} {
		b.Run(fmt.Sprintf("M=%d/K=%d/N=%d", m, s.k, s.n), func(b *testing.B) {
			wf := make([]float32, s.n*s.k)
			fill(wf, 2)
			w := QuantizeQ8_0(p, NewWeightsF32(wf, s.n, s.k))
			x, y := make([]float32, m*s.k), make([]float32, m*s.n)
			fill(x, 1)
			MatMulW(p, y, x, w, m)
			gemmW(p, y, x, w, m, false)
			var spent [2]time.Duration
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				MatMulW(p, y, x, w, m)
				t1 := time.Now()
				gemmW(p, y, x, w, m, false)
				spent[0] += t1.Sub(t0)
				spent[1] += time.Since(t1)
			}
			op := 2 * float64(m) * float64(s.k) * float64(s.n) * float64(b.N)
			b.ReportMetric(op/spent[0].Seconds()/1e9, "int8-GOP/s")
			b.ReportMetric(op/spent[1].Seconds()/1e9, "dequant-GFLOP/s")
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "speedup")
		})
	}
}

// BenchmarkQ8Tile times the tile kernel alone on one thread: a quad of x
// rows over a full slab (q8SlabPanels panels of q8TileC rows) of
// q8ChunkUnits units, x in L1 and the slab in L2 as in gemmQ8, in GOP/s.
func BenchmarkQ8Tile(b *testing.B) {
	const k = q8ChunkUnits * q8Unit * Q8Block
	const n = q8SlabPanels * q8TileC
	wf := make([]float32, n*k)
	fill(wf, 2)
	w := QuantizeQ8_0(nil, NewWeightsF32(wf, n, k))
	nbA := q8ActBlocks(w.nb)
	a := getQ8Act(q8TileR, nbA)
	x := make([]float32, k)
	fill(x, 1)
	for i := range q8TileR {
		quantizeAct(a.q[i*nbA*Q8Block:(i+1)*nbA*Q8Block], a.c[i*nbA:(i+1)*nbA], a.d[i*nbA:(i+1)*nbA], x)
	}
	slab := q8SlabPool.Get().(*q8Slab)
	packQ8Slab(slab, w, 0, q8SlabPanels, 0, q8ChunkUnits)
	out := make([]float32, q8SlabPanels*q8TileR*q8TileC)
	for name, tile := range q8Kernels() {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				tile(a, 0, nbA, slab, q8ChunkUnits, q8SlabPanels, out)
			}
			b.ReportMetric(2*float64(q8TileR*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOP/s")
		})
	}
}
