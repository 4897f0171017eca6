package cpuexec

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/tensor"
)

// llama32_1B is Llama-3.2-1B's config.json (1.236 B parameters, tied head).
const llama32_1B = `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":2048,
"intermediate_size":8192,"num_hidden_layers":16,"num_attention_heads":32,"num_key_value_heads":8,
"head_dim":64,"vocab_size":128256,"max_position_embeddings":131072,"rms_norm_eps":1e-5,
"rope_theta":500000.0,"rope_scaling":{"factor":32.0,"high_freq_factor":4.0,"low_freq_factor":1.0,
"original_max_position_embeddings":8192,"rope_type":"llama3"},"tie_word_embeddings":true,
"bos_token_id":128000,"eos_token_id":128001,"hidden_act":"silu"}`

var bench1B struct {
	once sync.Once
	cfg  *model.Config
	w    *model.Weights
	err  error
}

// randomWeights fills every tensor of cfg with small pseudo-random values,
// in parallel, without going through files (the 1B shape is 4.9 GB fp32).
func randomWeights(cfg *model.Config, pool *tensor.Pool) *model.Weights {
	w := &model.Weights{}
	for _, b := range model.Bindings(cfg, w) {
		n := 1
		for _, d := range b.Shape {
			n *= d
		}
		data := make([]float32, n)
		pool.Run(n, func(lo, hi int) {
			x := uint32(lo)*2654435761 + 1
			for i := lo; i < hi; i++ {
				x ^= x << 13
				x ^= x >> 17
				x ^= x << 5
				data[i] = (float32(x>>8)/(1<<24) - 0.5) * 0.05
			}
		})
		b.SetFloat32(data)
	}
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	return w
}

func load1B(b *testing.B, pool *tensor.Pool) (*model.Config, *model.Weights) {
	bench1B.once.Do(func() {
		cfg, err := model.ParseConfig([]byte(llama32_1B))
		if err != nil {
			bench1B.err = err
			return
		}
		cfg.MaxPositions = 4096
		bench1B.cfg, bench1B.w = cfg, randomWeights(cfg, pool)
	})
	if bench1B.err != nil {
		b.Fatal(bench1B.err)
	}
	return bench1B.cfg, bench1B.w
}

// weightBytes is what one forward step must read: every weight once (the
// tied embedding is read only as the LM head; embedding lookups are rows).
func weightBytes(cfg *model.Config) float64 {
	return float64(cfg.NumParams()-int64(cfg.Vocab*cfg.Hidden)*boolInt(!cfg.TieWordEmbeddings)) * 4
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// streamCopyGBs measures a STREAM-like copy over 512 MiB with the pool,
// counting bytes read plus written, best of 5.
func streamCopyGBs(pool *tensor.Pool) float64 {
	const n = 64 << 20
	src, dst := make([]float32, n), make([]float32, n)
	for i := range src {
		src[i] = float32(i)
	}
	best := 0.0
	for rep := 0; rep < 5; rep++ {
		start := time.Now()
		pool.Run(n, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
		if gbs := 2 * 4 * n / time.Since(start).Seconds() / 1e9; gbs > best {
			best = gbs
		}
	}
	return best
}

// BenchmarkDecode1B runs decode steps of a Llama-3.2-1B-shaped model with
// 512 tokens of context per sequence and reports tokens/s, the effective
// weight-read bandwidth and its share of a STREAM copy measured alongside.
func BenchmarkDecode1B(b *testing.B) {
	pool := tensor.NewPool(0)
	defer pool.Close()
	cfg, w := load1B(b, pool)
	stream := streamCopyGBs(pool)
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			const ctxLen = 512
			per := (ctxLen + 16 + 15) / 16
			r, err := NewExecutor(cfg, w, Options{BlockSize: 16, NumBlocks: batch * per, Pool: pool})
			if err != nil {
				b.Fatal(err)
			}
			step := decodeBatch(batch, per, ctxLen)
			ctx := context.Background()
			if _, err := r.Step(ctx, &step, r.KVPlacement()); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := r.Step(ctx, &step, r.KVPlacement()); err != nil {
					b.Fatal(err)
				}
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			gbs := weightBytes(cfg) / sec / 1e9
			b.ReportMetric(float64(batch)/sec, "tok/s")
			b.ReportMetric(gbs, "weight-GB/s")
			b.ReportMetric(stream, "stream-GB/s")
			b.ReportMetric(100*gbs/stream, "%stream")
		})
	}
}

// decodeBatch is a decode step of batch sequences, each at position pos
// (a token to decode after pos of context) with its own per blocks.
func decodeBatch(batch, per, pos int) forward.Batch {
	step := forward.Batch{Seqs: make([]forward.SeqBatch, batch)}
	for i := range step.Seqs {
		blocks := make([]int, per)
		for j := range blocks {
			blocks[j] = i*per + j
		}
		step.Seqs[i] = forward.SeqBatch{Tokens: []int{1 + i}, Pos: pos, Blocks: blocks, NumLogits: 1}
	}
	return step
}

// formats1B are the 1B shape's random weights in float32, BF16, F16 and Q8_0,
// built once (8.7 GB together).
var formats1B struct {
	once sync.Once
	w    map[string]*model.Weights
}

var formatNames = []string{"f32", "bf16", "f16", "q8_0"}

// load1BFormats returns the 1B shape's weights by format: load1B's float32
// matrices, and the same converted to BF16 (nearest) and quantized to
// Q8_0; vectors are shared.
func load1BFormats(b *testing.B, pool *tensor.Pool) (*model.Config, map[string]*model.Weights) {
	cfg, w := load1B(b, pool)
	formats1B.once.Do(func() {
		formats1B.w = map[string]*model.Weights{"f32": w}
		for name, d := range map[string]tensor.DType{"bf16": tensor.BF16, "f16": tensor.F16, "q8_0": tensor.Q8_0} {
			c := *w
			c.Layers = slices.Clone(w.Layers)
			c.Embed = tensor.Convert(pool, w.Embed, d)
			c.LMHead = c.Embed
			if w.LMHead != w.Embed {
				c.LMHead = tensor.Convert(pool, w.LMHead, d)
			}
			for i := range c.Layers {
				l := &c.Layers[i]
				for _, m := range []**tensor.Weights{&l.WQ, &l.WK, &l.WV, &l.WO, &l.WGate, &l.WUp, &l.WDown} {
					*m = tensor.Convert(pool, *m, d)
				}
			}
			formats1B.w[name] = &c
		}
	})
	return cfg, formats1B.w
}

// BenchmarkDecode1BFormats runs decode steps of the 1B shape (batches of
// 1 and 16 sequences, 512 tokens of context each) with float32, BF16, F16
// and Q8_0 weights, interleaved step by step (each op is one step of every
// format, timed apart), and reports each format's tokens/s, its speed-up
// over float32 in the same op sequence (x-f32), and the bytes of its
// weights.
func BenchmarkDecode1BFormats(b *testing.B) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	cfg, ws := load1BFormats(b, pool)
	const ctxLen = 512
	per := (ctxLen + 16 + 15) / 16
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			step := decodeBatch(batch, per, ctxLen)
			interleaved(b, cfg, ws, pool, batch*per, &step, func(sec float64) (float64, string) { return float64(batch) / sec, "tok/s" })
		})
	}
}

// BenchmarkPrefill1BFormats runs one 512-token prefill step of the 1B
// shape per format, interleaved as BenchmarkDecode1BFormats does, and
// reports GFLOP/s (2·parameters·tokens) and the share of float32's
// (x-f32).
func BenchmarkPrefill1BFormats(b *testing.B) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	cfg, ws := load1BFormats(b, pool)
	const n = 512
	blocks := make([]int, n/16)
	for i := range blocks {
		blocks[i] = i
	}
	step := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: fixture.Tokens(1, n, cfg.Vocab), Blocks: blocks, NumLogits: 1}}}
	flop := 2 * float64(cfg.NumParams()) * n
	interleaved(b, cfg, ws, pool, n/16, &step, func(sec float64) (float64, string) { return flop / sec / 1e9, "GFLOP/s" })
}

// interleaved runs step on one executor per format, one after the other
// in every op (after one untimed warm-up step each), and reports rate(mean
// step seconds) per format, each format's rate over float32's, and the
// weights' bytes.
func interleaved(b *testing.B, cfg *model.Config, ws map[string]*model.Weights, pool *tensor.Pool, blocks int, step *forward.Batch, rate func(sec float64) (float64, string)) {
	ctx := context.Background()
	execs := map[string]*Executor{}
	for _, name := range formatNames {
		r, err := NewExecutor(cfg, ws[name], Options{BlockSize: 16, NumBlocks: blocks, Pool: pool})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Step(ctx, step, r.KVPlacement()); err != nil {
			b.Fatal(err)
		}
		execs[name] = r
	}
	spent := map[string]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, name := range formatNames {
			r := execs[name]
			start := time.Now()
			if _, err := r.Step(ctx, step, r.KVPlacement()); err != nil {
				b.Fatal(err)
			}
			spent[name] += time.Since(start)
		}
	}
	f32, unit := rate(spent["f32"].Seconds() / float64(b.N))
	for _, name := range formatNames {
		v, _ := rate(spent[name].Seconds() / float64(b.N))
		b.ReportMetric(v, name+"-"+unit)
		if name != "f32" {
			b.ReportMetric(v/f32, name+"-x-f32")
		}
		b.ReportMetric(float64(ws[name].Bytes())/1e9, name+"-weight-GB")
	}
}

// BenchmarkPrefill1B runs one 512-token prefill step.
func BenchmarkPrefill1B(b *testing.B) {
	pool := tensor.NewPool(0)
	defer pool.Close()
	cfg, w := load1B(b, pool)
	const n = 512
	r, err := NewExecutor(cfg, w, Options{BlockSize: 16, NumBlocks: n / 16, Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	blocks := make([]int, n/16)
	for i := range blocks {
		blocks[i] = i
	}
	tokens := fixture.Tokens(1, n, cfg.Vocab)
	step := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens, Blocks: blocks, NumLogits: 1}}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Step(context.Background(), &step, r.KVPlacement()); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(n/sec, "tok/s")
	b.ReportMetric(2*float64(cfg.NumParams())*n/sec/1e9, "GFLOP/s")
}

// BenchmarkDecode1BKV runs decode steps of the 1B shape with BF16 weights
// (load1BFormats' conversion, the default for a BF16 checkpoint) and the
// KV cache in float32, BF16 and F16, at long contexts: one sequence at 2k
// and 8k tokens of context and 16 sequences at 2k. As in
// BenchmarkDecode1BFormats, each op runs one step per KV format back to
// back, timed apart, and it reports each format's tokens/s, its speed-up
// over float32 KV (x-f32) and its KV bytes per token of the model.
func BenchmarkDecode1BKV(b *testing.B) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	base, ws := load1BFormats(b, pool)
	cfg := *base
	cfg.MaxPositions = 8192 + 16
	for _, c := range []struct{ ctx, batch int }{{2048, 1}, {8192, 1}, {2048, 16}} {
		b.Run(fmt.Sprintf("ctx=%d/batch=%d", c.ctx, c.batch), func(b *testing.B) {
			ctx := context.Background()
			per := (c.ctx + 16) / 16
			step := forward.Batch{Seqs: make([]forward.SeqBatch, c.batch)}
			for i := range step.Seqs {
				blocks := make([]int, per)
				for j := range blocks {
					blocks[j] = i*per + j
				}
				step.Seqs[i] = forward.SeqBatch{Tokens: []int{1 + i}, Pos: c.ctx, Blocks: blocks, NumLogits: 1}
			}
			execs := make([]*Executor, len(kvDTypes))
			for i, dt := range kvDTypes {
				r, err := NewExecutor(&cfg, ws["bf16"], Options{BlockSize: 16, NumBlocks: c.batch * per, KVDType: dt, Pool: pool})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.Step(ctx, &step, r.KVPlacement()); err != nil {
					b.Fatal(err)
				}
				execs[i] = r
			}
			spent := make([]time.Duration, len(kvDTypes))
			b.ResetTimer()
			for range b.N {
				for i, r := range execs {
					start := time.Now()
					if _, err := r.Step(ctx, &step, r.KVPlacement()); err != nil {
						b.Fatal(err)
					}
					spent[i] += time.Since(start)
				}
			}
			for i, dt := range kvDTypes {
				b.ReportMetric(float64(c.batch*b.N)/spent[i].Seconds(), dt.String()+"-tok/s")
				if i > 0 {
					b.ReportMetric(spent[0].Seconds()/spent[i].Seconds(), dt.String()+"-x-f32")
				}
				b.ReportMetric(float64(execs[i].KVLayout().TokenBytes()), dt.String()+"-KV-B/token")
			}
		})
	}
}

// BenchmarkDecode1BDrafts runs the decode step of one sequence (512
// tokens of context) of the 1B shape with BF16 weights, carrying 0, 1, 3
// and 4 speculative drafts with logits for each, and reports ms per step and
// its cost over the step without drafts (x-plain, from the same run):
// the acceptance a draft needs to pay for itself.
func BenchmarkDecode1BDrafts(b *testing.B) {
	pool := tensor.NewPool(0)
	defer pool.Close()
	cfg, ws := load1BFormats(b, pool)
	const ctxLen = 512
	per := (ctxLen + 16 + 15) / 16
	r, err := NewExecutor(cfg, ws["bf16"], Options{BlockSize: 16, NumBlocks: per, Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	plain := 0.0
	for _, drafts := range []int{0, 1, 3, 4} {
		b.Run(fmt.Sprintf("drafts=%d", drafts), func(b *testing.B) {
			step := decodeBatch(1, per, ctxLen)
			step.Seqs[0].Tokens = []int{1, 2, 3, 4, 5}[:1+drafts]
			step.Seqs[0].NumLogits = 1 + drafts
			ctx := context.Background()
			if _, err := r.Step(ctx, &step, r.KVPlacement()); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := r.Step(ctx, &step, r.KVPlacement()); err != nil {
					b.Fatal(err)
				}
			}
			ms := b.Elapsed().Seconds() * 1e3 / float64(b.N)
			if drafts == 0 {
				plain = ms
			}
			b.ReportMetric(ms, "ms/step")
			if plain > 0 {
				b.ReportMetric(ms/plain, "x-plain")
			}
		})
	}
}
