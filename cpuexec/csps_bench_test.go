package cpuexec

import (
	"context"
	"fmt"
	"testing"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/tensor"
)

// cspsBenchModel is a 4-layer, 256-wide GQA model with a 4096-token
// context: long enough prompts for attention to matter on a CPU.
func cspsBenchModel(b *testing.B) *model.Model {
	b.Helper()
	dir, err := fixture.Dir(b.TempDir(), fixture.Spec{Hidden: 256, Intermediate: 512, Layers: 4, Heads: 8, KVHeads: 2, MaxPositions: 4096, Seed: 5})
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{DType: model.Float32})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkCSPS times, on ranks = 1 (one rank, the plain executor) and on
// CSPS over 2 and 4 ranks (and 4 ranks with M = 4 micro-partitions, and
// with CSA at 3 levels, level-2 drop 0.5; and SP-TP over 2 and 4 ranks,
// and 4 with M = 4):
// the prefill of one 2048-token prompt in one chunk (the CSPS prompt
// sharded along the sequence, SP-NTP unless sp-tp), and one
// decode step of that sequence at 2048 tokens of context (q moved to the
// shards). Reports prompt tokens per second and comm bytes per step.
func BenchmarkCSPS(b *testing.B) {
	m := cspsBenchModel(b)
	pool := tensor.NewPool(0)
	defer pool.Close()
	const prompt, bs = 2048, 16
	tokens := fixture.Tokens(1, prompt+1, m.Config.Vocab)
	for _, rm := range []struct {
		n, micro int
		csa      CSA
		sptp     bool
	}{{1, 1, CSA{}, false}, {2, 1, CSA{}, false}, {4, 1, CSA{}, false}, {4, 4, CSA{}, false}, {4, 1, CSA{Levels: 3, Drop: 0.5}, false},
		{2, 1, CSA{}, true}, {4, 1, CSA{}, true}, {4, 4, CSA{}, true}} {
		n, micro := rm.n, rm.micro
		perRank := (prompt/bs + n) / n
		var run func(context.Context, *forward.Batch) ([]float32, error)
		var blocks []int
		var comm func() int64
		if n == 1 {
			e, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: bs, NumBlocks: prompt/bs + 1, Pool: pool})
			if err != nil {
				b.Fatal(err)
			}
			run = func(ctx context.Context, bt *forward.Batch) ([]float32, error) {
				return e.Step(ctx, bt, e.KVPlacement())
			}
			comm = func() int64 { return 0 }
			for j := 0; j <= prompt/bs; j++ {
				blocks = append(blocks, j)
			}
		} else {
			o := CSPSOptions{Ranks: n, BlockSize: bs, PerRank: perRank, MicroPartitions: micro, CSA: rm.csa, Options: Options{Pool: pool}}
			if rm.sptp {
				o.Configure = sptpAll
			}
			c, err := NewCSPS(m.Config, m.Weights, o)
			if err != nil {
				b.Fatal(err)
			}
			run = func(ctx context.Context, bt *forward.Batch) ([]float32, error) { return c.Step(ctx, bt, c.Placement()) }
			comm = func() int64 { return c.CommStats().Total().SentBytes }
			ranks, counts := spread(prompt/bs, n)
			blocks = newSPAlloc(n, perRank).table(append(ranks, n-1), append(counts, 1))
		}
		pre := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens[:prompt], Blocks: blocks, NumLogits: 1}}}
		dec := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens[prompt:], Pos: prompt, Blocks: blocks, NumLogits: 1}}}
		ctx := context.Background()
		name := fmt.Sprintf("ranks=%d,M=%d", n, micro)
		if rm.csa.Levels > 1 {
			name += fmt.Sprintf(",csa=%d@%g", rm.csa.Levels, rm.csa.Drop)
		}
		if rm.sptp {
			name += ",sp-tp"
		}
		b.Run(name+fmt.Sprintf("/prefill%d", prompt), func(b *testing.B) {
			c0 := comm()
			for range b.N {
				if _, err := run(ctx, &pre); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(prompt*b.N)/b.Elapsed().Seconds(), "tok/s")
			b.ReportMetric(float64(comm()-c0)/float64(b.N), "comm-B/step")
		})
		b.Run(name+fmt.Sprintf("/decode@%d", prompt), func(b *testing.B) {
			if _, err := run(ctx, &pre); err != nil {
				b.Fatal(err)
			}
			c0 := comm()
			b.ResetTimer()
			for range b.N {
				if _, err := run(ctx, &dec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(comm()-c0)/float64(b.N), "comm-B/step")
		})
	}
}
