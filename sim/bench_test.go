package sim

import "testing"

// BenchmarkStepTime is the simulator's inner loop: the duration of one
// serving step (64 decodes and a 512-token prefill chunk) of Llama-3.3-70B
// FP8 on 8×H200, over every rank of the layout.
func BenchmarkStepTime(b *testing.B) {
	cfg := preset(b, "meta-llama/Llama-3.3-70B-Instruct")
	cm := costModel(b, "8xH200", Precision{Weights: FP8, Activations: BF16, KV: BF16})
	for _, plan := range []string{"tp=8", "sp=8", "sp=2,tp=4", "pp=2,tp=4", "dp=8"} {
		b.Run(plan, func(b *testing.B) {
			lc := layoutCost(b, cm, cfg, plan)
			shape := benchShape(64)
			b.ReportAllocs()
			for b.Loop() {
				lc.Step(&shape)
			}
		})
	}
}

// BenchmarkRankStepTime is one rank's breakdown of the same step.
func BenchmarkRankStepTime(b *testing.B) {
	cfg := preset(b, "meta-llama/Llama-3.3-70B-Instruct")
	lc := layoutCost(b, costModel(b, "8xH200", Precision{Weights: FP8, Activations: BF16, KV: BF16}), cfg, "tp=8")
	shape := benchShape(64)
	b.ReportAllocs()
	for b.Loop() {
		lc.StepTime(0, &shape)
	}
}
