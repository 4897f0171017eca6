package tensor

import (
	"fmt"
	"testing"
	"time"
)

// Benchmarks of MatMulW on Llama-3.2-1B's projection shapes with the
// pool of benchThreads. Decode (m = 1) is bandwidth-bound, so every op
// reads a different copy of w out of a set of at least lowpBenchBytes, as a
// forward pass reads each layer's weights once: w never comes from cache.

// lowpBenchBytes is the least each decode benchmark's set of weight copies
// holds: four times the 32 MiB L3 of the reference machine.
const lowpBenchBytes = 128 << 20

// decodeShapes are the 1B model's decode products: the MLP's up/gate
// (2048 → 8192) and down (8192 → 2048) projections and the fused
// q|k|v projection (2048 → 3072).
var decodeShapes = []struct {
	name string
	k, n int
}{
	{"up", 2048, 8192},
	{"down", 8192, 2048},
	{"qkv", 2048, 3072},
}

var benchDTypes = []DType{F32, BF16, F16, Q8_0}

// cloneWeights copies w's data into fresh memory.
func cloneWeights(w *Weights) *Weights {
	c := *w
	c.f32 = append([]float32(nil), w.f32...)
	c.half = append([]uint16(nil), w.half...)
	c.q = append([]uint8(nil), w.q...)
	return &c
}

// weightCopies returns copies of the n×k matrix wf stored as dt, enough
// that together they hold at least min bytes.
func weightCopies(p *Pool, dt DType, wf []float32, n, k, minBytes int) []*Weights {
	w := makeWeights(dt, wf, n, k)
	if dt == Q8_0 {
		w = QuantizeQ8_0(p, NewWeightsF32(wf, n, k))
	}
	ws := []*Weights{w}
	for len(ws)*w.Bytes() < minBytes {
		ws = append(ws, cloneWeights(w))
	}
	return ws
}

// BenchmarkMatMulWDecode reports ns per product and the rate at which w's
// stored bytes are read (GB/s), for each shape and weight format at m = 1.
func BenchmarkMatMulWDecode(b *testing.B) {
	p := NewPool(benchThreads)
	defer p.Close()
	for _, s := range decodeShapes {
		wf := make([]float32, s.n*s.k)
		fill(wf, 2)
		x, y := make([]float32, s.k), make([]float32, s.n)
		fill(x, 1)
		for _, dt := range benchDTypes {
			b.Run(fmt.Sprintf("%s/K=%d/N=%d/%v", s.name, s.k, s.n, dt), func(b *testing.B) {
				ws := weightCopies(p, dt, wf, s.n, s.k, lowpBenchBytes)
				for _, w := range ws {
					MatMulW(p, y, x, w, 1) // page in
				}
				b.ResetTimer()
				i := 0
				for b.Loop() {
					MatMulW(p, y, x, ws[i%len(ws)], 1)
					i++
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(ws[0].Bytes())/sec/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkMatMulWDecodeRatio runs the four formats in turn inside each
// op, so that their times share the machine's load, and reports each
// format's ns per product and its speed-up over float32 weights (f32-ns /
// format-ns) in the same run.
func BenchmarkMatMulWDecodeRatio(b *testing.B) {
	p := NewPool(benchThreads)
	defer p.Close()
	for _, s := range decodeShapes {
		b.Run(fmt.Sprintf("%s/K=%d/N=%d", s.name, s.k, s.n), func(b *testing.B) {
			wf := make([]float32, s.n*s.k)
			fill(wf, 2)
			x, y := make([]float32, s.k), make([]float32, s.n)
			fill(x, 1)
			sets := make([][]*Weights, len(benchDTypes))
			for d, dt := range benchDTypes {
				sets[d] = weightCopies(p, dt, wf, s.n, s.k, lowpBenchBytes)
				for _, w := range sets[d] {
					MatMulW(p, y, x, w, 1)
				}
			}
			var spent [4]time.Duration
			b.ResetTimer()
			i := 0
			for b.Loop() {
				for d, ws := range sets {
					t0 := time.Now()
					MatMulW(p, y, x, ws[i%len(ws)], 1)
					spent[d] += time.Since(t0)
				}
				i++
			}
			for d, dt := range benchDTypes {
				b.ReportMetric(float64(spent[d].Nanoseconds())/float64(b.N), dt.String()+"-ns")
				if d > 0 {
					b.ReportMetric(float64(spent[0])/float64(spent[d]), dt.String()+"/f32")
				}
			}
		})
	}
}

// BenchmarkMatMulWPrefill reports GFLOP/s (2·m·k·n per op) of an m = 512
// product for float32 and BF16 weights, run in turn inside each op, and
// BF16's share of float32's rate in the same run.
func BenchmarkMatMulWPrefill(b *testing.B) {
	p := NewPool(benchThreads)
	defer p.Close()
	const m = 512
	for _, s := range []struct{ k, n int }{{2048, 2048}, {8192, 2048}} {
		b.Run(fmt.Sprintf("M=%d/K=%d/N=%d", m, s.k, s.n), func(b *testing.B) {
			wf := make([]float32, s.n*s.k)
			fill(wf, 2)
			x, y := make([]float32, m*s.k), make([]float32, m*s.n)
			fill(x, 1)
			ws := []*Weights{NewWeightsF32(wf, s.n, s.k), makeWeights(BF16, wf, s.n, s.k)}
			for _, w := range ws {
				MatMulW(p, y, x, w, m)
			}
			var spent [2]time.Duration
			b.ResetTimer()
			for b.Loop() {
				for d, w := range ws {
					t0 := time.Now()
					MatMulW(p, y, x, w, m)
					spent[d] += time.Since(t0)
				}
			}
			flop := 2 * float64(m) * float64(s.k) * float64(s.n) * float64(b.N)
			b.ReportMetric(flop/spent[0].Seconds()/1e9, "f32-GFLOP/s")
			b.ReportMetric(flop/spent[1].Seconds()/1e9, "bf16-GFLOP/s")
			b.ReportMetric(float64(spent[0])/float64(spent[1]), "bf16/f32")
		})
	}
}

// BenchmarkMatMulWBatch reports GFLOP/s of batched decode (small m, w in
// cache after the first op) for each weight format, 2048 → 2048.
func BenchmarkMatMulWBatch(b *testing.B) {
	p := NewPool(benchThreads)
	defer p.Close()
	const k, n = 2048, 2048
	wf := make([]float32, n*k)
	fill(wf, 2)
	for _, m := range []int{4, 16, 32, 64} {
		x, y := make([]float32, m*k), make([]float32, m*n)
		fill(x, 1)
		for _, dt := range benchDTypes {
			w := makeWeights(dt, wf, n, k)
			b.Run(fmt.Sprintf("M=%d/%v", m, dt), func(b *testing.B) {
				MatMulW(p, y, x, w, m)
				for b.Loop() {
					MatMulW(p, y, x, w, m)
				}
				b.ReportMetric(2*float64(m*k*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
