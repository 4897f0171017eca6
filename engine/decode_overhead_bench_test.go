package engine

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
	"github.com/gearboxlm/gearbox/tokenizer"
)

// BenchmarkDecodeOverhead110M splits a batch-1 float32 decode token of
// llama2.c's stories110M shape (fixture.Shapes["stories110m"]: hidden
// 768, 12 layers, 12 heads, intermediate 2048, vocab 32000, tied; random
// F32 weights written as a checkpoint, in $GEARBOX_BENCH_110M if set) on 2
// kernel threads into three nested times, measured in every op one after
// the other:
//
//   - engine-ms: a token of Engine.Generate (greedy, 128 tokens after a
//     23-token prompt, as scripts/c-fp32-compare runs gearbox generate
//     and the C program; DecodeTime over the tokens after the first), what
//     gearbox generate reports: scheduling, the executor step, sampling,
//     detokenizing and the hand-offs between the loop and the caller;
//   - step-ms: the executor's Step alone at the same positions (a second
//     executor on the same weights and pool);
//   - gemv-ms: the step's GEMVs alone (tensor.MatMulW with its shapes:
//     q, k, v, o, gate, up, down per layer and the LM head).
//
// step-gemv-ms is the executor's work outside the GEMVs (attention, norms,
// RoPE, SiLU, residuals, KV writes, the pool's hand-offs); engine-step-ms
// is the engine's per-token cost on top of the step. weights=file holds
// the matrices as gearbox generate does for a float32 checkpoint: views of
// the memory-mapped file; weights=heap holds copies in Go-allocated
// memory, as converted or quantized matrices are.
func BenchmarkDecodeOverhead110M(b *testing.B) {
	dir := os.Getenv("GEARBOX_BENCH_110M")
	if dir == "" {
		dir = b.TempDir()
		if err := fixture.Write(dir, fixture.Shapes["stories110m"]); err != nil {
			b.Fatal(err)
		}
	}
	m, err := model.Load(dir, model.Options{DType: model.Float32})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	if m.Config.Hidden != 768 || m.Config.Layers != 12 {
		b.Fatalf("%s is not the stories110m shape", dir)
	}
	b.Run("weights=file", func(b *testing.B) { decodeOverhead(b, m.Config, m.Weights, m.Tokenizer) })
	heap := *m.Weights
	heap.Layers = slices.Clone(m.Weights.Layers)
	heap.Embed = heapCopy(m.Weights.Embed)
	heap.LMHead = heap.Embed
	for i := range heap.Layers {
		l := &heap.Layers[i]
		for _, w := range []**tensor.Weights{&l.WQ, &l.WK, &l.WV, &l.WO, &l.WGate, &l.WUp, &l.WDown} {
			*w = heapCopy(*w)
		}
	}
	b.Run("weights=heap", func(b *testing.B) { decodeOverhead(b, m.Config, &heap, m.Tokenizer) })
}

// heapCopy copies a float32 matrix into Go-allocated memory.
func heapCopy(w *tensor.Weights) *tensor.Weights {
	n, k := w.Shape()
	v := make([]float32, n*k)
	for j := range n {
		w.Row(j, v[j*k:(j+1)*k])
	}
	return tensor.NewWeightsF32(v, n, k)
}

func decodeOverhead(b *testing.B, cfg *model.Config, w *model.Weights, tok *tokenizer.Tokenizer) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	const prompt, gen = 23, 128
	blocks := (prompt + gen + 15) / 16
	newExec := func() *cpuexec.Executor {
		r, err := cpuexec.NewExecutor(cfg, w, cpuexec.Options{BlockSize: 16, NumBlocks: blocks, Pool: pool})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	e := startEngine(b, newExec(), tok, []int{2}, sched.Config{MaxNumSeqs: 1})
	req := Request{Prompt: fixture.Tokens(1, prompt, 300), MaxTokens: gen, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}

	raw := newExec()
	ids := make([]int, blocks)
	for i := range ids {
		ids[i] = i
	}
	pre := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: req.Prompt, Blocks: ids, NumLogits: 1}}}
	ctx := context.Background()
	steps := func() time.Duration {
		if _, err := raw.Step(ctx, &pre, raw.KVPlacement()); err != nil {
			b.Fatal(err)
		}
		var t time.Duration
		for p := prompt; p < prompt+gen-1; p++ {
			s := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: []int{p % 300}, Pos: p, Blocks: ids, NumLogits: 1}}}
			start := time.Now()
			if _, err := raw.Step(ctx, &s, raw.KVPlacement()); err != nil {
				b.Fatal(err)
			}
			t += time.Since(start)
		}
		return t
	}
	var mats []*tensor.Weights
	for _, l := range w.Layers {
		mats = append(mats, l.WQ, l.WK, l.WV, l.WO, l.WGate, l.WUp, l.WDown)
	}
	mats = append(mats, w.LMHead)
	x, y := make([]float32, cfg.Intermediate), make([]float32, cfg.Vocab)
	for i := range x {
		x[i] = float32(i%7) * 0.01
	}
	gemvs := func() time.Duration {
		start := time.Now()
		for _, m := range mats {
			n, k := m.Shape()
			tensor.MatMulW(pool, y[:n], x[:k], m, 1)
		}
		return time.Since(start)
	}
	steps()
	gemvs()
	var engT, stepT, gemvT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, err := e.Generate(ctx, req, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(out.Tokens) != gen {
			b.Fatalf("%d tokens", len(out.Tokens))
		}
		engT += out.DecodeTime
		stepT += steps()
		for range gen - 1 {
			gemvT += gemvs()
		}
	}
	per := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(b.N*(gen-1)) }
	eng, step, gemv := per(engT), per(stepT), per(gemvT)
	b.ReportMetric(eng, "engine-ms")
	b.ReportMetric(step, "step-ms")
	b.ReportMetric(gemv, "gemv-ms")
	b.ReportMetric(step-gemv, "step-gemv-ms")
	b.ReportMetric(eng-step, "engine-step-ms")
	b.ReportMetric(1e3/eng, "engine-tok/s")
}
