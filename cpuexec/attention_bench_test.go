package cpuexec

import (
	"fmt"
	"testing"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// attentionBench is one layer of decode attention of the 1B shape (32
// query heads, 8 KV heads, head_dim 64) over a filled KV cache: batch
// sequences of ctxLen tokens each, run as rank.attention runs it.
type attentionBench struct {
	rk     *rank
	mb     *micro
	sh     *parallel.Shard
	q, out []float32
	qs     int
}

func newAttentionBench(tb testing.TB, pool *tensor.Pool, kv kvcache.Layout, batch, ctxLen int) *attentionBench {
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
		mb.seqs = append(mb.seqs, forward.SeqBatch{Tokens: []int{1}, Pos: ctxLen, Blocks: blocks, NumLogits: 1})
		st.tokSeq = append(st.tokSeq, s)
		st.tokPos = append(st.tokPos, ctxLen)
	}
	st.total, st.real, st.nl = batch, batch, batch
	x.sh = &parallel.Shard{SPSize: 1, Chunk: parallel.Heads{QLo: 0, QHi: cfg.Heads, KVLo: 0, KVHi: cfg.KVHeads}}
	x.q, x.out = make([]float32, batch*x.qs), make([]float32, batch*x.qs)
	for i := range x.q {
		x.q[i] = next()
	}
	return x
}

func (x *attentionBench) run() { x.rk.attention(0, x.mb, x.sh, x.q, x.qs, x.out, x.qs) }

// BenchmarkDecodeAttention times one layer of decode attention of the 1B
// shape on two threads: batch 1 and 16 at 2k and 8k tokens of context,
// with the KV cache in float32, BF16 and F16, and reports milliseconds
// per layer and the KV bytes read per second (each KV head's keys and
// values counted once, though its four query heads each read them).
func BenchmarkDecodeAttention(b *testing.B) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, ctxLen := range []int{2048, 8192} {
		for _, batch := range []int{1, 16} {
			for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
				b.Run(fmt.Sprintf("ctx=%d/batch=%d/kv=%s", ctxLen, batch, dt), func(b *testing.B) {
					kv := kvcache.Layout{BlockSize: 16, DType: dt}
					x := newAttentionBench(b, pool, kv, batch, ctxLen)
					x.run()
					b.ResetTimer()
					for range b.N {
						x.run()
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					bytes := float64(batch) * float64(ctxLen+1) * 8 * 64 * 2 * float64(kv.ElemBytes())
					b.ReportMetric(sec*1e3, "ms/layer")
					b.ReportMetric(bytes/sec/1e9, "KV-GB/s")
				})
			}
		}
	}
}
