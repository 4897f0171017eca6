package cpuexec

import (
	"context"
	"fmt"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// sptpAll configures every prompt over several ranks to run SP-TP.
func sptpAll(int) CSPSPrompt { return CSPSPrompt{SPTP: true} }

// newSPTPRun is newSPRun with the CSPS executor configured by configure
// and micro micro-partitions.
func newSPTPRun(t *testing.T, m *model.Model, ranks, perRank int, pool *tensor.Pool, configure func(int) CSPSPrompt, micro int) *spRun {
	t.Helper()
	r := newSPRun(t, m, ranks, perRank, pool)
	c, err := NewCSPS(m.Config, m.Weights, CSPSOptions{Ranks: ranks, BlockSize: 4, PerRank: perRank, Configure: configure,
		MicroPartitions: micro, Options: Options{Pool: pool}})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	return r
}

// TestCSPSSPTPMatchesSingleRank (T2): a long prompt prefilled with SP-TP
// over N ∈ {2, 3, 4} ranks (uneven SPTs, the last shorter; N ∤ heads at
// N = 3; KV heads recomputed by several ranks when N exceeds them),
// beside a short prompt living whole on one rank, in one chunk and in
// three chunks (the later ones moving queries to the cached keys), then
// decoded, matches one rank: logits within 1e-4 of the largest, greedy
// tokens equal. A step mixing an SP-TP and an SP-NTP prompt does too.
func TestCSPSSPTPMatchesSingleRank(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, kv := range []int{4, 2, 1} {
		m := loadParallelFixture(t, kv)
		for _, n := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("kv=%d/N=%d", kv, n), func(t *testing.T) {
				mixed := func(l int) CSPSPrompt { return CSPSPrompt{SPTP: l > 60} }
				r := newSPTPRun(t, m, n, 64, pool, mixed, 1)
				alloc := newSPAlloc(n, 64)
				const long = 90 // 23 blocks of 4
				ranks, counts := spread(23, n)
				one := &spSeq{tokens: fixture.Tokens(7, long, m.Config.Vocab), blocks: alloc.table(ranks, counts)}
				short := &spSeq{tokens: fixture.Tokens(8, 11, m.Config.Vocab), blocks: alloc.table([]int{n - 1}, []int{3})}
				ntp := &spSeq{tokens: fixture.Tokens(9, 45, m.Config.Vocab), blocks: alloc.table([]int{0, n - 1}, []int{6, 6})}
				r.step("one chunk", []*spSeq{one, short, ntp}, []int{long, 11, 45})

				chunked := &spSeq{tokens: one.tokens, blocks: alloc.table(ranks, counts)}
				chunked.blocks = append(chunked.blocks, alloc.table([]int{ranks[len(ranks)-1]}, []int{2})...)
				r.step("chunk 1", []*spSeq{chunked}, []int{37})
				r.step("chunk 2", []*spSeq{chunked}, []int{40})
				logits, _ := r.stepLast("chunk 3", []*spSeq{chunked}, []int{long - 77})
				for i := range 4 {
					chunked.tokens = append(chunked.tokens, tensor.MaxIndex(logits))
					logits, _ = r.stepLast(fmt.Sprintf("decode %d", i), []*spSeq{chunked}, []int{1})
				}
				t.Logf("largest logit error against one rank: %.2g of the row's largest", r.maxRel)
				if r.c.SPTPCopyBytes() == 0 {
					t.Fatal("SP-TP ran without its W_O column shards")
				}
			})
		}
	}
}

// TestCSPSSPTPMatchesOracle: a prompt as long as the model's context,
// prefilled with SP-TP over 4 ranks in one chunk and in three, against
// the float64 oracle, for GQA, MHA, attention biases (llama, qwen2),
// qwen3's q/k norms and BF16 weights.
func TestCSPSSPTPMatchesOracle(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, fx := range fixtureSpecs {
		switch fx.Name {
		case "llama-gqa", "llama-mha", "llama-untied-bias", "qwen2-bias", "qwen3-qknorm", "bf16":
		default:
			continue
		}
		t.Run(fx.Name, func(t *testing.T) { checkCSPSOracle(t, load(t, fx.Spec), pool, sptpAll) })
	}
}

// TestCSPSSPTPVolume holds SP-TP's traffic to App A's count (R10): per
// layer, over all ranks, the all-gather moves L·d·(N−1) elements and the
// reduce-scatter L·d·(N−1), whatever the uneven SPTs and the heads (GQA,
// N ∤ heads), and nothing else moves in a first chunk. A later chunk of
// Lc tokens moves the same 2·Lc·d·(N−1) plus, in all-to-alls, its queries
// to the ranks holding the earlier chunks' keys and (O, LSE) back. The
// ranks' W_O column copies total one W_O per layer.
func TestCSPSSPTPVolume(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, kv := range []int{8, 2} {
		m := loadParallelFixture(t, kv)
		cfg := m.Config
		for _, n := range []int{2, 3, 4} {
			c, err := NewCSPS(cfg, m.Weights, CSPSOptions{Ranks: n, BlockSize: 4, PerRank: 32, Configure: sptpAll, Options: Options{Pool: pool}})
			if err != nil {
				t.Fatal(err)
			}
			alloc := newSPAlloc(n, 32)
			ranks, counts := spread(23, n)
			tokens := fixture.Tokens(4, 90, cfg.Vocab)
			check := func(what string, b forward.Batch, lc int, a2a int64) {
				t.Helper()
				before := c.CommStats()
				if _, err := c.Step(context.Background(), &b, c.Placement()); err != nil {
					t.Fatal(err)
				}
				st := c.CommStats().Sub(before)
				want := int64(cfg.Layers) * int64(lc*cfg.Hidden*(n-1)) * 4
				ag, rs := st.Kind(comm.KindAllGather).SentBytes, st.Kind(comm.KindReduceScatter).SentBytes
				got := st.Kind(comm.KindAllToAll).SentBytes
				if ag != want || rs != want || got != a2a || st.Total().SentBytes != ag+rs+a2a {
					t.Fatalf("kv=%d N=%d %s: all-gather %d, reduce-scatter %d, all-to-all %d, in all %d bytes; App A gives %d each, all-to-alls %d",
						kv, n, what, ag, rs, got, st.Total().SentBytes, want, a2a)
				}
			}
			b := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens, Blocks: alloc.table(ranks, counts), NumLogits: 1}}}
			check("one chunk", b, 90, 0)
			// Chunk 2 (positions 40–89): each rank sends, for its head chunk,
			// the q of every token whose cached keys [0, 40) another rank
			// holds, and gets (O, LSE) back.
			blocks := alloc.table(ranks, counts)
			b = forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens[:40], Blocks: blocks, NumLogits: 1}}}
			if _, err := c.Step(context.Background(), &b, c.Placement()); err != nil {
				t.Fatal(err)
			}
			holders := 0 // ranks holding blocks 0–9 (positions 0–39)
			for r, k := range counts {
				if sum(counts[:r]) < 10 && k > 0 {
					holders++
				}
			}
			d := cfg.HeadDim
			var a2a int64
			for c := range n { // computing rank c, its head chunk; every holder but itself
				hq := int64(parallel.Even(cfg.Heads, n, c).Len())
				others := int64(holders)
				if sum(counts[:c]) < 10 {
					others--
				}
				a2a += int64(50) * hq * others * int64(d+d+1) * 4
			}
			b = forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens[40:], Pos: 40, Blocks: blocks, NumLogits: 1}}}
			check("chunk 2", b, 50, int64(cfg.Layers)*a2a)
			wo := int64(cfg.Layers) * int64(cfg.Hidden*cfg.Heads*d) * 4
			if got := c.SPTPCopyBytes(); got != wo {
				t.Fatalf("kv=%d N=%d: W_O column copies hold %d bytes, want one W_O per layer, %d", kv, n, got, wo)
			}
		}
	}
}

func sum(s []int) int {
	t := 0
	for _, v := range s {
		t += v
	}
	return t
}

// TestCSPSSPTPMicroPartitions (T3, R31): SP-TP pipelined over
// M ∈ {2, 3, 4, 16} micro-partitions (uneven ones, M = 16 capped at 8 so
// that each holds at least tensor.RowIndependentMin tokens) gives logits
// bitwise equal to M = 1 and moves the same all-gather and
// reduce-scatter bytes, for two long prompts (uneven SPTs) beside a short
// one living on one rank, under GQA with N ∤ heads; the pipelined step
// matches one rank too.
func TestCSPSSPTPMicroPartitions(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, kv := range []int{4, 1} {
		m := loadParallelFixture(t, kv)
		cfg := m.Config
		for _, n := range []int{2, 3, 4} {
			type result struct {
				logits []float32
				ag, rs int64
				calls  int64 // all-gathers, every rank
			}
			var single []float32
			run := func(micro int) result {
				c, err := NewCSPS(cfg, m.Weights, CSPSOptions{Ranks: n, BlockSize: 4, PerRank: 64, MicroPartitions: micro, Configure: sptpAll, Options: Options{Pool: pool}})
				if err != nil {
					t.Fatal(err)
				}
				alloc := newSPAlloc(n, 64)
				ranks, counts := spread(50, n)
				b := forward.Batch{Seqs: []forward.SeqBatch{
					{Tokens: fixture.Tokens(7, 200, cfg.Vocab), Blocks: alloc.table(ranks, counts), NumLogits: 200},
					{Tokens: fixture.Tokens(8, 11, cfg.Vocab), Blocks: alloc.table([]int{n - 1}, []int{3}), NumLogits: 2},
					{Tokens: fixture.Tokens(9, 90, cfg.Vocab), Blocks: alloc.table([]int{0, n - 1}, []int{12, 11}), NumLogits: 90},
				}}
				got, err := c.Step(context.Background(), &b, c.Placement())
				if err != nil {
					t.Fatal(err)
				}
				if single == nil {
					one, err := NewExecutor(cfg, m.Weights, Options{BlockSize: 4, NumBlocks: n * 64, Pool: pool})
					if err != nil {
						t.Fatal(err)
					}
					want, err := one.Step(context.Background(), &b, one.KVPlacement())
					if err != nil {
						t.Fatal(err)
					}
					single = append([]float32(nil), want...)
				}
				assertLogitsClose(t, fmt.Sprintf("kv=%d N=%d M=%d against one rank", kv, n, micro), got, single, cfg.Vocab)
				st := c.CommStats()
				ag := st.Kind(comm.KindAllGather)
				return result{append([]float32(nil), got...), ag.SentBytes, st.Kind(comm.KindReduceScatter).SentBytes, ag.Calls}
			}
			want := run(1)
			for _, micro := range []int{2, 3, 4, 16} {
				got := run(micro)
				for i := range got.logits {
					if got.logits[i] != want.logits[i] {
						t.Fatalf("kv=%d N=%d M=%d: logit %d is %v, M=1 %v", kv, n, micro, i, got.logits[i], want.logits[i])
					}
				}
				if parts := int64(min(micro, 290/tensor.RowIndependentMin)); got.calls != int64(n*cfg.Layers)*parts {
					t.Fatalf("kv=%d N=%d M=%d: %d all-gathers over the ranks, want %d per rank and layer", kv, n, micro, got.calls, parts)
				}
				if got.ag != want.ag || got.rs != want.rs || got.ag == 0 {
					t.Fatalf("kv=%d N=%d M=%d: all-gather %d and reduce-scatter %d bytes, M=1 %d and %d", kv, n, micro, got.ag, got.rs, want.ag, want.rs)
				}
			}
		}
	}
}

// TestCSPSSPTPEdges: SP-TP under a 20-token sliding window over 4 ranks
// (one chunk, three chunks, a decode step), over 6 ranks of a 4-head
// model, where two ranks hold no head yet take part in every all-gather
// and reduce-scatter, and with CSA asked for as well (SP-TP runs dense),
// matches one rank.
func TestCSPSSPTPEdges(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	m := loadParallelFixture(t, 2)
	checkWindowChunks(t, m, "window, ", func(win *model.Model) *spRun { return newSPTPRun(t, win, 4, 64, pool, sptpAll, 1) })

	l := load(t, fixture.Spec{Heads: 4, KVHeads: 2, Seed: 31})
	r := newSPTPRun(t, l.m, 6, 64, pool, sptpAll, 1)
	alloc := newSPAlloc(6, 64)
	ranks, counts := spread(23, 6)
	long := &spSeq{tokens: fixture.Tokens(5, 90, l.m.Config.Vocab), blocks: alloc.table(ranks, counts)}
	r.step("6 ranks, 4 heads", []*spSeq{long}, []int{90})
	if ag := r.c.CommStats().Kind(comm.KindAllGather).SentBytes; ag != int64(l.m.Config.Layers*90*l.m.Config.Hidden*5*4) {
		t.Fatalf("6 ranks: all-gathers moved %d bytes, want L·d·(N−1)·4 per layer", ag)
	}

	r = newSPRun(t, m, 4, 64, pool)
	c, err := NewCSPS(m.Config, m.Weights, CSPSOptions{Ranks: 4, BlockSize: 4, PerRank: 64, CSA: CSA{Levels: 2, Drop: 0.5},
		Configure: func(int) CSPSPrompt { return CSPSPrompt{SPTP: true, CSA: true, Drop: 0.5} }, Options: Options{Pool: pool}})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	alloc = newSPAlloc(4, 64)
	ranks, counts = spread(23, 4)
	r.step("SP-TP with CSA asked for", []*spSeq{{tokens: windowPrompt(m.Config.Vocab), blocks: alloc.table(ranks, counts)}}, []int{90})
	if st := c.CommStats(); st.Kind(comm.KindAllToAll).SentBytes != 0 || st.Kind(comm.KindReduceScatter).SentBytes == 0 {
		t.Fatalf("SP-TP with CSA asked for moved %+v: want SP-TP's collectives only", st.Total())
	}
}
