package cpuexec

import (
	"context"
	"fmt"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// sidpBenchConfig is a small Llama shape whose MLP is most of each layer
// (hidden 512, intermediate 2048: 12 MiB of fp32 MLP per layer, 4 MiB
// of attention), so a WaS fetch and a CaS round trip are both visible.
const sidpBenchConfig = `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":512,
"intermediate_size":2048,"num_hidden_layers":8,"num_attention_heads":8,"num_key_value_heads":4,
"head_dim":64,"vocab_size":4096,"max_position_embeddings":4096,"rms_norm_eps":1e-5,
"rope_theta":10000.0,"tie_word_embeddings":true,"hidden_act":"silu"}`

// BenchmarkSiDPStep times one decode step of b sequences per replica
// (1 token each, 128 tokens of context) on dp=2 under plain DP, SiDP WaS
// and SiDP CaS, reporting the MLP bytes fetched and the activation bytes
// sent per step. The WaS/CaS crossover in batched tokens (2·b) is the
// CPU's B_th (policy.DefaultSiDPThreshold).
func BenchmarkSiDPStep(b *testing.B) {
	cfg, err := model.ParseConfig([]byte(sidpBenchConfig))
	if err != nil {
		b.Fatal(err)
	}
	pool := tensor.NewPool(0)
	defer pool.Close()
	w := randomWeights(cfg, pool)
	plan := parallel.Plan{DP: 2, PP: 1, SP: 1, TP: 1}
	was, _ := parallel.SiDPPlacement(plan, parallel.FFNWaS)
	cas, _ := parallel.SiDPPlacement(plan, parallel.FFNCaS)
	for _, per := range sidpBenchBatches {
		for _, mode := range []struct {
			name string
			p    parallel.Placement
			hold []parallel.Placement
		}{{"dp", parallel.Standard(plan), nil}, {"was", was, []parallel.Placement{was}}, {"cas", cas, []parallel.Placement{was}}} {
			b.Run(fmt.Sprintf("batch=%dx2/%s", per, mode.name), func(b *testing.B) {
				e, err := NewExecutor(cfg, w, Options{Plan: plan, Placements: mode.hold, BlockSize: 16, NumBlocks: per * 9, Pool: pool})
				if err != nil {
					b.Fatal(err)
				}
				var step forward.Batch
				for i := range 2 * per {
					blocks := make([]int, 9)
					for j := range blocks {
						blocks[j] = i/2*9 + j
					}
					step.Seqs = append(step.Seqs, forward.SeqBatch{Tokens: []int{3 + i}, Pos: 128, Blocks: blocks, NumLogits: 1, Replica: i % 2})
				}
				ctx := context.Background()
				if _, err := e.Step(ctx, &step, mode.p); err != nil {
					b.Fatal(err)
				}
				before := e.CommStats()
				b.ResetTimer()
				for range b.N {
					if _, err := e.Step(ctx, &step, mode.p); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				d := e.CommStats().Sub(before)
				b.ReportMetric(float64(d.Kind(comm.KindRead).RecvBytes)/float64(b.N), "fetched-B/step")
				b.ReportMetric(float64(d.Kind(comm.KindSend).SentBytes)/float64(b.N), "sent-B/step")
				b.ReportMetric(float64(2*per*b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// sidpBenchBatches are BenchmarkSiDPStep's sequences per replica.
var sidpBenchBatches = []int{1, 4, 16, 24, 32, 64}
