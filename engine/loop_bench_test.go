package engine

import (
	"context"
	"testing"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// BenchmarkEngineDecode generates 200 tokens of one request through the
// engine loop on the built-in model; compare with BenchmarkPlanStep's
// executor-only numbers to see the loop's own cost per step.
func BenchmarkEngineDecode(b *testing.B) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		b.Fatal(err)
	}
	pool := tensor.NewPool(0)
	defer pool.Close()
	exec, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 64, Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	e := startEngine(b, exec, m.Tokenizer, m.EOS(), sched.Config{})
	req := Request{Prompt: m.Tokenizer.Encode("Once upon a time", true), MaxTokens: 200, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Generate(context.Background(), req, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(200*b.N)/b.Elapsed().Seconds(), "tok/s")
}
