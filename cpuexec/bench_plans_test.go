package cpuexec

import (
	"context"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

var benchPlans = []string{"single", "tp=2", "sp=2", "pp=2", "dp=2", "sp=2,tp=2", "tp=4", "sp=4,tp=2"}

// BenchmarkPlanStep runs one decode step (16 sequences × 1 token at 256
// tokens of context) and one 512-token prefill under each plan on the
// built-in model, reporting comm bytes per step and the share of rank time
// spent in collectives (waiting for peers included).
func BenchmarkPlanStep(b *testing.B) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		b.Fatal(err)
	}
	pool := tensor.NewPool(0)
	defer pool.Close()
	for _, ps := range benchPlans {
		plan, err := parallel.Parse(ps)
		if err != nil {
			b.Fatal(err)
		}
		for _, kind := range []string{"decode", "prefill512"} {
			b.Run(ps+"/"+kind, func(b *testing.B) {
				e, err := NewExecutor(m.Config, m.Weights, Options{Plan: plan, BlockSize: 16, NumBlocks: 16 * 17, Pool: pool})
				if err != nil {
					b.Fatal(err)
				}
				step := forward.Batch{}
				if kind == "decode" {
					for i := 0; i < 16; i++ {
						blocks := make([]int, 17)
						for j := range blocks {
							blocks[j] = i*17 + j
						}
						step.Seqs = append(step.Seqs, forward.SeqBatch{Tokens: []int{3 + i}, Pos: 256, Blocks: blocks, NumLogits: 1, Replica: i % plan.DP})
					}
				} else {
					blocks := make([]int, 32)
					for j := range blocks {
						blocks[j] = j
					}
					step.Seqs = []forward.SeqBatch{{Tokens: fixture.Tokens(1, 512, m.Config.Vocab), Blocks: blocks, NumLogits: 1}}
				}
				ctx := context.Background()
				if _, err := e.Step(ctx, &step, parallel.Standard(plan)); err != nil {
					b.Fatal(err)
				}
				bytes0, time0 := e.CommStats().Total().SentBytes, e.CommTime()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := e.Step(ctx, &step, parallel.Standard(plan)); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				var spent time.Duration
				for r, d := range e.CommTime() {
					spent += d - time0[r]
				}
				ranks := float64(plan.Ranks())
				b.ReportMetric(float64(e.CommStats().Total().SentBytes-bytes0)/float64(b.N), "comm-B/step")
				b.ReportMetric(100*spent.Seconds()/ranks/b.Elapsed().Seconds(), "%comm")
				b.ReportMetric(float64(len(step.Seqs[0].Tokens)*len(step.Seqs))*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}
