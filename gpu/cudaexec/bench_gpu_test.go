package cudaexec

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
)

// The speed benchmarks run on real model directories of Llama shapes with
// random BF16 weights (internal/cmd/mkmodel writes them; scripts/gpu-check
// does it all):
//
//	GEARBOX_BENCH_MODEL_1B=/tmp/llama-1b GEARBOX_BENCH_MODEL_8B=/tmp/llama-8b \
//	  ./cudaexec.test -test.run '^$' -test.bench 'Decode|Prefill' -test.benchtime 50x
//
// They skip, with one line, when no GPU is found or the variable is unset.

var benchModels sync.Map // env var → *model.Model

func benchModel(b *testing.B, env string) *model.Model {
	b.Helper()
	requireGPU(b)
	dir := os.Getenv(env)
	if dir == "" {
		b.Skipf("%s is not set (see bench_gpu_test.go)", env)
	}
	if m, ok := benchModels.Load(env); ok {
		return m.(*model.Model)
	}
	m, err := model.Load(dir, model.Options{})
	if err != nil {
		b.Fatal(err)
	}
	benchModels.Store(env, m)
	return m
}

// copyBandwidth is the device-to-device copy rate in bytes read plus bytes
// written per second: the median of 20 copies of 1 GiB, timed with events.
func (e *Executor) copyBandwidth() (float64, error) {
	const size = 1 << 30
	var rate float64
	err := e.ctx.Do(func() error {
		src, err := e.ctx.Alloc(size)
		if err != nil {
			return err
		}
		defer e.ctx.Free(src)
		dst, err := e.ctx.Alloc(size)
		if err != nil {
			return err
		}
		defer e.ctx.Free(dst)
		if err := e.ctx.MemsetD32Async(src, 0x3f800000, size/4, e.s); err != nil {
			return err
		}
		start, err := e.ctx.NewEvent()
		if err != nil {
			return err
		}
		defer e.ctx.DestroyEvent(start)
		end, err := e.ctx.NewEvent()
		if err != nil {
			return err
		}
		defer e.ctx.DestroyEvent(end)
		var times []time.Duration
		for i := 0; i < 22; i++ {
			if err := e.ctx.RecordEvent(start, e.s); err != nil {
				return err
			}
			if err := e.ctx.CopyDtoDAsync(dst, src, size, e.s); err != nil {
				return err
			}
			if err := e.ctx.RecordEvent(end, e.s); err != nil {
				return err
			}
			if err := e.ctx.SyncEvent(end); err != nil {
				return err
			}
			d, err := e.ctx.Elapsed(start, end)
			if err != nil {
				return err
			}
			if i >= 2 { // warm-up
				times = append(times, d)
			}
		}
		slices.Sort(times)
		rate = 2 * size / times[len(times)/2].Seconds()
		return nil
	})
	return rate, err
}

// prefillContext fills n sequences with ctx tokens each, in chunks that fit
// the executor's step, and returns their decode batch (one token each at
// position ctx).
func prefillContext(b *testing.B, x *Executor, n, ctx int) *forward.Batch {
	b.Helper()
	cfg := x.Config()
	per := x.KVLayout().BlocksFor(ctx + 1)
	if n*per > x.KVLayout().NumBlocks {
		b.Skipf("KV pool of %d blocks holds fewer than %d sequences of %d tokens", x.KVLayout().NumBlocks, n, ctx)
	}
	dec := &forward.Batch{}
	var pending forward.Batch
	budget := 0
	flush := func() {
		if len(pending.Seqs) > 0 {
			if _, err := x.Step(context.Background(), &pending, x.Placements()[0]); err != nil {
				b.Fatal(err)
			}
		}
		pending, budget = forward.Batch{}, 0
	}
	for i := 0; i < n; i++ {
		blocks := make([]int, per)
		for j := range blocks {
			blocks[j] = i*per + j
		}
		toks := fixture.Tokens(i+1, ctx+1, cfg.Vocab)
		if budget+ctx > x.opts.MaxNumTokens || len(pending.Seqs) == x.opts.MaxNumSeqs {
			flush()
		}
		pending.Seqs = append(pending.Seqs, forward.SeqBatch{Tokens: toks[:ctx], Blocks: blocks})
		budget += ctx
		dec.Seqs = append(dec.Seqs, forward.SeqBatch{Tokens: toks[ctx:], Pos: ctx, Blocks: blocks, NumLogits: 1})
	}
	flush()
	return dec
}

func benchDecode(b *testing.B, env string) {
	m := benchModel(b, env)
	x := newExec(b, m.Config, m.Weights, Options{DType: model.BFloat16, MaxNumSeqs: 256, MaxModelLen: 4096})
	copyBW, err := x.copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	weights := float64(x.Info().WeightBytes)
	b.Logf("%s: %.2f GB of weights, device copy %.0f GB/s (read + write)", x.Info().Device, weights/1e9, copyBW/1e9)
	const ctx = 512
	for _, n := range []int{1, 8, 64, 256} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			dec := prefillContext(b, x, n, ctx)
			for i := 0; i < 3; i++ { // capture the bucket's graph, warm up
				if _, err := x.StepGreedy(context.Background(), dec, x.Placements()[0]); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if _, err := x.StepGreedy(context.Background(), dec, x.Placements()[0]); err != nil {
					b.Fatal(err)
				}
			}
			step := time.Since(start).Seconds() / float64(b.N)
			b.ReportMetric(step*1e3, "ms/step")
			b.ReportMetric(float64(n)/step, "tok/s")
			b.ReportMetric(weights/step/1e9, "weight-GB/s")
			b.ReportMetric(100*weights/step/copyBW, "%copy-bw")
		})
	}
}

// BenchmarkDecode1B: greedy decode steps (StepGreedy, what the engine runs
// for greedy requests: the argmax on the device) of n sequences with 512
// tokens of context on the Llama-3.2-1B shape; at batch 1 the weights are
// read at weight-GB/s, %copy-bw of the device copy rate measured in the
// same run.
func BenchmarkDecode1B(b *testing.B) { benchDecode(b, "GEARBOX_BENCH_MODEL_1B") }

// BenchmarkDecode8B is BenchmarkDecode1B on the Llama-3.1-8B shape.
func BenchmarkDecode8B(b *testing.B) { benchDecode(b, "GEARBOX_BENCH_MODEL_8B") }

// BenchmarkPrefill1B: one 4,096-token prompt on the Llama-3.2-1B shape.
func BenchmarkPrefill1B(b *testing.B) {
	m := benchModel(b, "GEARBOX_BENCH_MODEL_1B")
	x := newExec(b, m.Config, m.Weights, Options{DType: model.BFloat16, MaxNumSeqs: 16, MaxModelLen: 8192})
	const n = 4096
	blocks := make([]int, x.KVLayout().BlocksFor(n))
	for i := range blocks {
		blocks[i] = i
	}
	batch := &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: fixture.Tokens(7, n, m.Config.Vocab), Blocks: blocks, NumLogits: 1}}}
	for i := 0; i < 2; i++ {
		if _, err := x.Step(context.Background(), batch, x.Placements()[0]); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := x.Step(context.Background(), batch, x.Placements()[0]); err != nil {
			b.Fatal(err)
		}
	}
	step := time.Since(start).Seconds() / float64(b.N)
	b.ReportMetric(step*1e3, "ms/step")
	b.ReportMetric(n/step, "tok/s")
	b.ReportMetric(2*float64(m.Config.NumParams())*n/step/1e12, "weight-TFLOP/s")
}
