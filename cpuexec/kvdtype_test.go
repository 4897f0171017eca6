package cpuexec

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// A KV cache of BF16 or F16 keys and values against float32's, the
// weights float32 in both. Tolerances, per logits row, as a fraction of
// the row's largest |logit|:
//
//   - 16-bit KV against float32 KV on one rank: BF16 3e-2, F16 5e-3
//     (the stored keys and values are rounded once, to 8 and 11
//     significant bits). Observed: stories260K BF16 0.0094, F16 0.0014;
//     the random fixture BF16 0.0024, F16 0.0003.
//   - BF16 KV under tp, pp, sp or dp against one rank with BF16 KV:
//     1e-3. A plan moves a key's float32 value by an ulp or so (other
//     summation orders), which can move its BF16 rounding by one BF16
//     step (2⁻⁸ of the value): with some 10⁴ elements written, a few such
//     flips are expected in a run, and where they fall moves with any
//     change of summation order. Observed: 3e-7 to 9e-6 with per-head
//     decode attention, 3.8e-5 to 1.2e-4 with grouped heads; with an F16
//     cache in the same test (8 times the flips, each an eighth the size)
//     1.2e-5 to 4.4e-5 with either. A misplaced head or block errs by the
//     logits' own scale.
var kvTol = map[tensor.DType]float64{tensor.BF16: 3e-2, tensor.F16: 5e-3}

// kvPlanTol bounds BF16 KV under a plan against one rank with BF16 KV.
const kvPlanTol = 1e-3

// kvLogits runs tokens as one prefill step on one rank with the KV cache
// in dt and returns the logits of every position.
func kvLogits(t testing.TB, m *model.Model, pool *tensor.Pool, tokens []int, dt tensor.DType) []float32 {
	t.Helper()
	n := (len(tokens) + 7) / 8
	r, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: 8, NumBlocks: n, KVDType: dt, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.KVLayout().DType; got != dt {
		t.Fatalf("KV layout in %s, asked for %s", got, dt)
	}
	blocks := make([]int, n)
	for i := range blocks {
		blocks[i] = i
	}
	out, err := r.Step(context.Background(), &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens, Blocks: blocks, NumLogits: len(tokens)}}}, r.KVPlacement())
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(out)
}

// TestHalfKVMatchesFloat32 runs the built-in stories260K and a random
// fixture, float32 weights, with the KV cache in BF16 and F16 against the
// float32 cache: every position's logits, teacher-forced on the float32
// greedy continuation (prefill attention reads the rounded keys and values
// it has just written), stay within the dtype's tolerance; the KV bytes
// are half; and the built-in model's greedy text, generated token by token
// through the engine (decode attention), is float32's.
func TestHalfKVMatchesFloat32(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	fx, err := fixture.Dir(t.TempDir(), lowpSpec)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []struct{ name, dir string }{{"stories260K", ""}, {"fixture", fx}} {
		m := loadAs(t, src.dir, model.Options{DType: model.Float32})
		v := m.Config.Vocab
		tokens := forcedTokens(m, src.dir == "", func(tok []int) []float32 { return kvLogits(t, m, pool, tok, tensor.F32) })
		want := kvLogits(t, m, pool, tokens, tensor.F32)
		for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
			t.Run(src.name+"/"+dt.String(), func(t *testing.T) {
				got := kvLogits(t, m, pool, tokens, dt)
				worst := 0.0
				for p := range tokens {
					diff, maxAbs := rowError(got[p*v:(p+1)*v], want[p*v:(p+1)*v])
					worst = math.Max(worst, diff/maxAbs)
					if diff > kvTol[dt]*maxAbs {
						t.Fatalf("position %d: max |diff| %.3g exceeds %g × max |logit| %.3g", p, diff, kvTol[dt], maxAbs)
					}
				}
				if worst == 0 {
					t.Fatal("the logits equal float32 KV's: the cache was not rounded")
				}
				t.Logf("max relative logits error %.3g", worst)
			})
		}
		if src.dir != "" {
			continue
		}
		greedy := func(dt tensor.DType) ([]int, *Executor) {
			r, err := NewExecutor(m.Config, m.Weights, Options{KVDType: dt, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			g, err := engine.NewEngine(engine.Options{Exec: r, Tokenizer: m.Tokenizer, Sched: sched.Config{MaxNumBatchedTokens: 64}})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Start()()
			out, err := g.Generate(context.Background(), engine.Request{Prompt: tokens[:5], MaxTokens: 64, Sampling: sample.Params{Logprobs: -1}, IgnoreEOS: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return out.Tokens, r
		}
		wantTokens, f32 := greedy(tensor.F32)
		for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
			got, r := greedy(dt)
			if !slices.Equal(got, wantTokens) {
				t.Errorf("stories260K greedy tokens with %s KV %v, float32 KV %v", dt, got, wantTokens)
			}
			if r.KVLayout().NumBlocks != f32.KVLayout().NumBlocks || 2*r.KVBytes()[0] != f32.KVBytes()[0] {
				t.Errorf("%s KV: %d blocks of %d bytes in all, float32 %d of %d", dt, r.KVLayout().NumBlocks, r.KVBytes()[0], f32.KVLayout().NumBlocks, f32.KVBytes()[0])
			}
		}
	}
}

// TestHalfKVPlans runs the parallel scenario (prefill chunks and decodes)
// under every plan with the KV cache in BF16 and compares each step's
// logits with one rank's with BF16 KV, within kvPlanTol.
func TestHalfKVPlans(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	dir, err := fixture.Dir(t.TempDir(), lowpSpec)
	if err != nil {
		t.Fatal(err)
	}
	m := loadAs(t, dir, model.Options{DType: model.Float32})
	vocab := m.Config.Vocab
	single, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: 4, NumBlocks: 200, KVDType: tensor.BF16, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	ref := newScenario(vocab, 1, 16)
	var want [][]float32
	for i := range ref.steps {
		b := ref.batch(i, 1)
		logits, err := single.Step(context.Background(), &b, parallel.Standard(parallel.Single))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, slices.Clone(logits))
		ref.advance(i)
	}
	for _, ps := range []string{"tp=2", "tp=4", "pp=2", "pp=2,tp=2", "sp=2", "sp=4", "sp=2,tp=2", "dp=2"} {
		t.Run(ps, func(t *testing.T) {
			plan, err := parallel.Parse(ps)
			if err != nil {
				t.Fatal(err)
			}
			e, err := NewExecutor(m.Config, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 200, KVDType: tensor.BF16, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			worst, _ := stepsWithin(t, e, plan, vocab, want, kvPlanTol)
			t.Logf("max relative logits error against one rank: %.3g", worst)
		})
	}
}

// TestHalfKVTransition moves a BF16 KV cache pp=2 → tp=2 (the shards not
// held) and back: every stored element arrives bit for bit, the KV bytes
// moved are half of a float32 cache's, comm counts them, and decoding on
// under tp=2 gives one rank's BF16-KV tokens.
func TestHalfKVTransition(t *testing.T) {
	l := load(t, fixture.Spec{Heads: 8, KVHeads: 4, Layers: 4, Intermediate: 96, AttentionBias: true, Seed: 310})
	cfg := l.m.Config
	pp := parallel.Standard(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1})
	tp := parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2})
	pool := tensor.NewPool(2)
	defer pool.Close()
	const blocks = 24
	prompt := fixture.Tokens(7, 21, cfg.Vocab)
	table := []int{3, 9, 4, 11, 17, 5, 0, 22, 1, 2}
	decode := func(e *Executor, first parallel.Placement, then func()) []int {
		b := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: prompt, Blocks: table, NumLogits: 1}}}
		logits, err := e.Step(context.Background(), &b, first)
		if err != nil {
			t.Fatal(err)
		}
		tokens := append(slices.Clone(prompt), tensor.MaxIndex(logits))
		then()
		for len(tokens) < len(prompt)+6 {
			b := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens[len(tokens)-1:], Pos: len(tokens) - 1, Blocks: table, NumLogits: 1}}}
			logits, err := e.Step(context.Background(), &b, e.KVPlacement())
			if err != nil {
				t.Fatal(err)
			}
			tokens = append(tokens, tensor.MaxIndex(logits))
		}
		return tokens[len(prompt):]
	}
	single, err := NewExecutor(cfg, l.m.Weights, Options{BlockSize: 4, NumBlocks: blocks, KVDType: tensor.BF16, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	want := decode(single, single.KVPlacement(), func() {})

	e, err := NewExecutor(cfg, l.m.Weights, Options{Placements: []parallel.Placement{pp}, BlockSize: 4, NumBlocks: blocks, KVDType: tensor.BF16, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	got := decode(e, pp, func() {
		before := globalKV(e)
		stats := e.CommStats()
		st, err := e.Transition(context.Background(), tp)
		if err != nil {
			t.Fatal(err)
		}
		assertKVEqual(t, "bf16 KV pp=2 → tp=2", globalKV(e), before)
		// Each tp=2 rank receives the other stage's 2 layers of its 2 KV
		// heads: keys and values of every block, 2 bytes an element.
		if want := int64(2 * (2 * 2) * 2 * blocks * 4 * cfg.HeadDim * 2); st.KVBytes != want {
			t.Fatalf("KV bytes moved %d, want %d (half of float32's)", st.KVBytes, want)
		}
		delta := e.CommStats().Sub(stats).Total()
		if delta.SentBytes != st.KVBytes+st.WeightBytes {
			t.Fatalf("comm counted %d bytes sent; the transition says KV %d + weights %d", delta.SentBytes, st.KVBytes, st.WeightBytes)
		}
		if e.KVLayout().DType != tensor.BF16 {
			t.Fatalf("KV layout after the transition in %s", e.KVLayout().DType)
		}
	})
	if !slices.Equal(got, want) {
		t.Fatalf("tokens after the transition %v, one rank %v", got, want)
	}
	before := globalKV(e)
	if _, err := e.Transition(context.Background(), pp); err != nil {
		t.Fatal(err)
	}
	assertKVEqual(t, "bf16 KV tp=2 → pp=2", globalKV(e), before)
}

// TestHalfKVSwapReshard is TestSwapReshard with the KV cache and the host
// store in BF16: prefill under one layout, swap out, reshard, swap in,
// decode under another. The host store holds every stored element once,
// bit for bit, the bytes are 2 an element, every rank's pulled slice
// equals the store, and the greedy tokens equal one rank's with BF16 KV.
func TestHalfKVSwapReshard(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	l := load(t, fixture.Spec{Heads: 8, KVHeads: 2, Layers: 4, Intermediate: 96, Seed: 322})
	cfg := l.m.Config
	prompts := [][]int{fixture.Tokens(1, 13, cfg.Vocab), fixture.Tokens(2, 6, cfg.Vocab), fixture.Tokens(3, 9, cfg.Vocab)}
	const steps = 6
	single, err := NewExecutor(cfg, l.m.Weights, Options{BlockSize: 4, NumBlocks: 32, KVDType: tensor.BF16, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	want, singleKV := swapRun(t, single, prompts, steps)
	for _, pair := range [][2]parallel.Plan{
		{{DP: 1, PP: 4, SP: 1, TP: 1}, {DP: 1, PP: 1, SP: 1, TP: 4}},
		{{DP: 1, PP: 1, SP: 1, TP: 4}, {DP: 1, PP: 2, SP: 1, TP: 2}},
	} {
		cp, cd := pair[0], pair[1]
		t.Run(fmt.Sprintf("%s→%s", cp, cd), func(t *testing.T) {
			e, err := NewExecutor(cfg, l.m.Weights, Options{Plan: cp, BlockSize: 4, NumBlocks: 32, MicroBatches: 1, HostBlocks: 40, KVDType: tensor.BF16, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			if e.host.DType != tensor.BF16 {
				t.Fatalf("host store in %s", e.host.DType)
			}
			got, hostKV := swapRun(t, e, prompts, steps, parallel.Standard(cd))
			if cp.PP == 4 {
				assertKVEqual(t, "bf16 host store after a pp=4 prefill", hostKV, singleKV)
			}
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("sequence %d: %v, single rank %v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestKVDTypeRefused: a KV cache in a format the cache does not store
// (Q8_0) is refused when the executor is built, naming the format.
func TestKVDTypeRefused(t *testing.T) {
	m := loadAs(t, "", model.Options{DType: model.Float32})
	_, err := NewExecutor(m.Config, m.Weights, Options{KVDType: tensor.Q8_0})
	if err == nil || !strings.Contains(err.Error(), "q8_0") || !strings.Contains(err.Error(), "f32, bf16 or f16") {
		t.Fatalf("a Q8_0 KV cache: %v", err)
	}
	if _, err := kvcache.New(kvcache.Layout{Layers: 1, KVHeads: 1, HeadDim: 2, BlockSize: 1, NumBlocks: 1, DType: tensor.DType(9)}); err == nil {
		t.Fatal("an unknown KV dtype was accepted")
	}
}

// TestAttendBlock holds attention over a BF16 or F16 cache, over a
// float32 cache holding the same values widened, and over the same keys
// and values in rows of a buffer (rowTiles), to a float64 reference
// within 1e-5, outputs and log-sum-exps: block sizes whose gathered
// tiles (64 keys of head_dim 64) span 16 blocks, 4 and half of one;
// query groups of 1 to 9 heads; one query row (decode, attendGroup) and
// blocks of 5 and 40 consecutive rows (a prompt's chunk: 40 takes
// several passes), each row seeing one key more than the last, with and
// without a sliding window and a stop (rows that see no key included);
// ranges starting inside a block, ending inside one, and a block held
// by another rank.
func TestAttendBlock(t *testing.T) {
	const d, ctx, scale = 64, 300, 0.125
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		for _, bs := range []int{4, 16, 128} {
			l := kvcache.Layout{Layers: 1, KVHeads: 2, HeadDim: d, BlockSize: bs, NumBlocks: 2 * (ctx/bs + 1)}
			hl, fl := l, l
			hl.DType, fl.DType = dt, tensor.F32
			hc, err := kvcache.New(hl)
			if err != nil {
				t.Fatal(err)
			}
			fc, err := kvcache.New(fl)
			if err != nil {
				t.Fatal(err)
			}
			table := make([]int, ctx/bs+1)
			for i := range table {
				table[i] = 2*i + 1 // every other block
			}
			rnd := fixture.Tokens(bs, 2*l.KVHeads*d*ctx, 1<<20)
			val := func(i int) float32 { return float32(rnd[i])/(1<<19) - 1 }
			k, v := make([]float32, l.KVHeads*d), make([]float32, l.KVHeads*d)
			for pos := range ctx {
				for i := range k {
					k[i], v[i] = val(2*(pos*len(k)+i)), val(2*(pos*len(k)+i)+1)
				}
				hc.Put(0, table, pos, k, v)
				hc.Get(0, table, pos, k, v) // the stored values, widened
				fc.Put(0, table, pos, k, v)
			}
			held := slices.Clone(table)
			held[1] = -1                    // on another rank
			buf := make([]float32, ctx*2*d) // KV head 1's keys and values, a row per position
			for pos := range ctx {
				blk, at := table[pos/bs], pos%bs*d
				copy(buf[pos*2*d:], fc.Keys(0, blk, 1)[at:at+d])
				copy(buf[pos*2*d+d:], fc.Values(0, blk, 1)[at:at+d])
			}
			srcs := []struct {
				name  string
				src   tiles
				table []int // the reference's
			}{
				{dt.String() + " cache", cacheTiles{hc, 0, 1, held}, held},
				{"float32 cache", cacheTiles{fc, 0, 1, held}, held},
				{"rows", rowTiles{buf, 2 * d, 0, d, 0}, table},
			}
			for _, g := range []int{1, 3, 8, 9} {
				for _, rows := range []int{1, 5, 40} {
					// Rows are 2g+1 heads apart, outputs 2g: strides
					// beyond the heads attended.
					qs, os := (2*g+1)*d, 2*g*d
					q := make([]float32, rows*qs)
					for i := range q {
						q[i] = val(7*i%len(rnd)) * 2
					}
					for _, span := range [][2]int{{0, ctx - 39}, {bs + 1, ctx - 42}, {0, 2*bs - 1}} {
						for _, window := range []int{0, 2*bs + 3} {
							for _, stop := range []int{0, span[1] + 3} {
								for _, sr := range srcs {
									b := queries{q: q, out: make([]float32, rows*os), lse: make([]float32, rows*g), qStride: qs, outStride: os, lseStride: g,
										d: d, g: g, rows: rows, from: span[0], to: span[1], window: window, stop: stop, scale: scale}
									if c, ok := sr.src.(cacheTiles); ok && rows == 1 && window == 0 && stop == 0 {
										attendGroup(getScratch(), b.out, q[:g*d], g, c.cache, 0, held, 1, b.from, b.to, scale, b.lse)
									} else {
										attendBlock(getScratch(), &b, sr.src)
									}
									what := fmt.Sprintf("%s of %s values, bs=%d g=%d rows=%d window=%d stop=%d", sr.name, dt, bs, g, rows, window, stop)
									checkAttention(t, what, &b, fc, sr.table)
								}
							}
						}
					}
				}
			}
		}
	}
}

// checkAttention holds every row and head of b's output and log-sum-exps
// to attentionF64 over KV head 1 of c under table, within 1e-5; a row
// that sees no key must have zeros and −Inf. Row r's keys are worked out
// here, not by queries.keys: [from, to+r), the last window of them, none
// from stop on.
func checkAttention(t *testing.T, what string, b *queries, c *kvcache.Cache, table []int) {
	t.Helper()
	d, g := b.d, b.g
	for r := range b.rows {
		from, to := b.from, b.to+r
		if b.window > 0 {
			from = max(from, to-b.window)
		}
		if b.stop > 0 {
			to = min(to, b.stop)
		}
		for h := range g {
			got, lse := b.outVec(r, h), float64(b.lse[r*b.lseStride+h])
			if from >= to {
				if slices.ContainsFunc(got, func(x float32) bool { return x != 0 }) || !math.IsInf(lse, -1) {
					t.Fatalf("%s: row %d sees no key, head %d has output %v and log-sum-exp %g", what, r, h, got[:4], lse)
				}
				continue
			}
			ref, refLSE := attentionF64(b.q[r*b.qStride+h*d:r*b.qStride+(h+1)*d], c, table, 1, from, to, float64(b.scale))
			for i, x := range ref {
				if e := math.Abs(float64(got[i]) - x); e > 1e-5*math.Max(1, math.Abs(x)) {
					t.Fatalf("%s: row %d keys [%d,%d) head %d element %d: %g, float64 reference %g", what, r, from, to, h, i, got[i], x)
				}
			}
			if e := math.Abs(lse - refLSE); e > 1e-5*math.Max(1, math.Abs(refLSE)) {
				t.Fatalf("%s: row %d head %d log-sum-exp %g, float64 reference %g", what, r, h, lse, refLSE)
			}
		}
	}
}

// attentionF64 is softmax(q·Kᵀ·scale)·V in float64 over keys [from, to)
// of KV head head of a float32 cache, skipping blocks whose id is
// negative, and the log-sum-exp of the scaled scores.
func attentionF64(q []float32, c *kvcache.Cache, table []int, head, from, to int, scale float64) ([]float64, float64) {
	d, bs := c.HeadDim, c.BlockSize
	var ws []float64
	var rows [][]float32
	top := math.Inf(-1)
	for p := from; p < to; p++ {
		blk := table[p/bs]
		if blk < 0 {
			continue
		}
		key := c.Keys(0, blk, head)[p%bs*d : (p%bs+1)*d]
		s := 0.0
		for i := range q {
			s += float64(q[i]) * float64(key[i])
		}
		ws = append(ws, s*scale)
		rows = append(rows, c.Values(0, blk, head)[p%bs*d:(p%bs+1)*d])
		top = max(top, s*scale)
	}
	out := make([]float64, d)
	sum := 0.0
	for j, s := range ws {
		w := math.Exp(s - top)
		sum += w
		for i := range out {
			out[i] += w * float64(rows[j][i])
		}
	}
	for i := range out {
		out[i] /= sum
	}
	return out, top + math.Log(sum)
}
