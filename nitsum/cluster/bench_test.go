package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/tensor"
)

// BenchmarkReconfigure measures stop-and-migrate on CPU ranks: 8
// requests with 480 tokens of context each on TP1+TP1 (a model with 8 KV
// heads of 64 dims, 8 layers: 16 KiB of KV per token) move to TP2 and
// back, each op one move. It reports the KV bytes that crossed ranks per
// second of pause (pause: from pausing the instances to resuming them,
// handshake and engine hand-offs included) and the pause itself.
func BenchmarkReconfigure(b *testing.B) {
	dir, err := fixture.Dir(b.TempDir(), fixture.Spec{Heads: 8, KVHeads: 8, HeadDim: 64, Hidden: 512, Intermediate: 256, Layers: 8, MaxPositions: 512, Seed: 5})
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{DType: model.Float32})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	pool := tensor.NewPool(2)
	defer pool.Close()
	c, err := New(Options{Config: m.Config, Weights: m.Weights, Ranks: 2, Tiers: tiers(b), Profile: profile(), Layout: layout(8, 1, 1),
		BlockSize: 16, NumBlocks: 512, Pool: pool, Manual: true, Window: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for i := range 8 {
		if _, err := c.Submit(engine.Request{ID: fmt.Sprint("r", i), Prompt: fixture.Tokens(i, 480, m.Config.Vocab), MaxTokens: 16, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}); err != nil {
			b.Fatal(err)
		}
	}
	for range 3 { // prefill every prompt (2048 tokens a step)
		if _, err := c.Iterate(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	var bytes int64
	var pause float64
	b.ResetTimer()
	for i := range b.N {
		to := layout(8, 2)
		if i%2 == 1 {
			to = layout(8, 1, 1)
		}
		rep, err := c.Reconfigure(context.Background(), to)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Moved != 8 {
			b.Fatalf("%d moved, want 8", rep.Moved)
		}
		bytes += rep.Bytes
		pause += rep.Pause.Seconds()
	}
	b.ReportMetric(float64(bytes)/pause/1e9, "GB/s")
	b.ReportMetric(pause/float64(b.N)*1e3, "pause-ms")
	b.ReportMetric(float64(bytes)/float64(b.N)/(1<<20), "MiB/op")
}

// BenchmarkDispatch measures Submit through the runtime: the global
// scheduler's decision (G1–G7) plus the chosen engine's admission, on 4
// ranks as four TP1 instances, no step run.
func BenchmarkDispatch(b *testing.B) {
	c := newCluster(b, 4, layout(64, 1, 1, 1, 1), true, nil)
	prompt := fixture.Tokens(1, 8, c.cfg.Vocab)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.Submit(engine.Request{ID: fmt.Sprint("d", i), Prompt: prompt, MaxTokens: 4, Sampling: sample.Params{Logprobs: -1}}); err != nil {
			b.Fatal(err)
		}
	}
}
