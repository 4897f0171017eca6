package cpuexec

import (
	"fmt"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// attentionBench is one layer of attention of the 1B shape (32 query
// heads, 8 KV heads, head_dim 64) over a filled KV cache, run as
// rank.attention runs it: batch sequences whose last rows tokens are the
// queries, the last at position ctxLen (rows 1: decode; rows ctxLen+1: a
// whole prompt's prefill).
type attentionBench struct {
	rk     *rank
	mb     *micro
	sh     *parallel.Shard
	q, out []float32
	qs     int
}

func newAttentionBench(tb testing.TB, pool *tensor.Pool, kv kvcache.Layout, batch, ctxLen, rows int) *attentionBench {
	cfg := &model.Config{Heads: 32, KVHeads: 8, HeadDim: 64}
	per := (ctxLen + kv.BlockSize) / kv.BlockSize
	kv.Layers, kv.KVHeads, kv.HeadDim, kv.NumBlocks = 1, cfg.KVHeads, cfg.HeadDim, batch*per
	cache, err := kvcache.New(kv)
	if err != nil {
		tb.Fatal(err)
	}
	rnd := uint32(1)
	next := func() float32 {
		rnd ^= rnd << 13
		rnd ^= rnd >> 17
		rnd ^= rnd << 5
		return float32(rnd>>8)/(1<<24) - 0.5
	}
	kd := cfg.KVHeads * cfg.HeadDim
	k, v := make([]float32, kd), make([]float32, kd)
	mb := &micro{}
	x := &attentionBench{rk: &rank{e: &Executor{cfg: cfg, pool: pool}, cache: cache}, mb: mb, qs: cfg.Heads * cfg.HeadDim}
	st := &x.rk.st
	for s := range batch {
		blocks := make([]int, per)
		for j := range blocks {
			blocks[j] = s*per + j
		}
		for pos := 0; pos <= ctxLen; pos++ {
			for i := range k {
				k[i], v[i] = next(), next()
			}
			cache.Put(0, blocks, pos, k, v)
		}
		first := ctxLen + 1 - rows
		mb.seqs = append(mb.seqs, forward.SeqBatch{Tokens: make([]int, rows), Pos: first, Blocks: blocks, NumLogits: 1})
		for pos := first; pos <= ctxLen; pos++ {
			st.tokSeq = append(st.tokSeq, s)
			st.tokPos = append(st.tokPos, pos)
		}
	}
	n := batch * rows
	st.total, st.real, st.nl = n, n, n
	x.sh = &parallel.Shard{SPSize: 1, Chunk: parallel.Heads{QLo: 0, QHi: cfg.Heads, KVLo: 0, KVHi: cfg.KVHeads}}
	x.q, x.out = make([]float32, n*x.qs), make([]float32, n*x.qs)
	for i := range x.q {
		x.q[i] = next()
	}
	return x
}

func (x *attentionBench) run() { x.rk.attention(0, x.mb, x.sh, x.q, x.qs, x.out, x.qs) }

// kvDTypes are the KV cache formats the benchmarks compare.
var kvDTypes = []tensor.DType{tensor.F32, tensor.BF16, tensor.F16}

// timeKVFormats runs an attentionBench (batch, ctxLen, rows) per KV
// format once untimed, then b.N times, the formats back to back in every
// op and timed apart, so that their ratios compare runs milliseconds
// apart on a shared machine; it returns the benches and each format's
// seconds per op.
func timeKVFormats(b *testing.B, pool *tensor.Pool, batch, ctxLen, rows int) ([]*attentionBench, []float64) {
	xs := make([]*attentionBench, len(kvDTypes))
	for i, dt := range kvDTypes {
		xs[i] = newAttentionBench(b, pool, kvcache.Layout{BlockSize: 16, DType: dt}, batch, ctxLen, rows)
		xs[i].run()
	}
	spent := make([]time.Duration, len(kvDTypes))
	b.ResetTimer()
	for range b.N {
		for i, x := range xs {
			start := time.Now()
			x.run()
			spent[i] += time.Since(start)
		}
	}
	secs := make([]float64, len(xs))
	for i := range secs {
		secs[i] = spent[i].Seconds() / float64(b.N)
	}
	return xs, secs
}

// BenchmarkDecodeAttention times one layer of decode attention of the 1B
// shape on two threads, batch 1 and 16 at 2k and 8k tokens of context,
// over a KV cache in float32, BF16 and F16 (timeKVFormats). It reports each format's
// milliseconds per layer, its KV bytes read per second (each KV head's
// keys and values counted once, though its four query heads each read
// them) and its speed-up over float32 (x-f32).
func BenchmarkDecodeAttention(b *testing.B) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, ctxLen := range []int{2048, 8192} {
		for _, batch := range []int{1, 16} {
			b.Run(fmt.Sprintf("ctx=%d/batch=%d", ctxLen, batch), func(b *testing.B) {
				xs, secs := timeKVFormats(b, pool, batch, ctxLen, 1)
				for i, dt := range kvDTypes {
					bytes := float64(batch) * float64(ctxLen+1) * 8 * 64 * 2 * float64(xs[i].rk.cache.ElemBytes())
					b.ReportMetric(secs[i]*1e3, dt.String()+"-ms/layer")
					b.ReportMetric(bytes/secs[i]/1e9, dt.String()+"-KV-GB/s")
					if i > 0 {
						b.ReportMetric(secs[0]/secs[i], dt.String()+"-x-f32")
					}
				}
			})
		}
	}
}

// BenchmarkPrefillAttention times one layer of causal attention of the
// 1B shape on two threads for a whole prompt of 512, 2k and 4k tokens,
// over a KV cache in float32, BF16 and F16 (timeKVFormats). It reports each format's milliseconds per
// layer and GFLOP/s (4·head_dim FLOPs per query head and visible key:
// the scores and the weighted values).
func BenchmarkPrefillAttention(b *testing.B) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, n := range []int{512, 2048, 4096} {
		b.Run(fmt.Sprintf("prompt=%d", n), func(b *testing.B) {
			_, secs := timeKVFormats(b, pool, 1, n-1, n)
			flops := 4 * 64 * 32 * float64(n) * float64(n+1) / 2
			for i, dt := range kvDTypes {
				b.ReportMetric(secs[i]*1e3, dt.String()+"-ms/layer")
				b.ReportMetric(flops/secs[i]/1e9, dt.String()+"-GFLOP/s")
			}
		})
	}
}
