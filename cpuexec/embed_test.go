package cpuexec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// TestEmbeddingsMatchOracle serves embedding requests (engine.Request
// Embed) under every kind of plan, beside a generation and through
// chunked prefill: each embedding is the oracle's final-norm hidden state
// of its prompt's last token, with no tokens and the prompt's usage.
func TestEmbeddingsMatchOracle(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, fx := range []fixture.Named{fixture.Foundation[0], fixture.Foundation[6]} { // llama GQA, qwen3 with q/k norms
		l := load(t, fx.Spec)
		for _, plan := range []parallel.Plan{
			parallel.Single, {DP: 1, PP: 1, SP: 1, TP: 2}, {DP: 1, PP: 2, SP: 1, TP: 1}, {DP: 1, PP: 1, SP: 2, TP: 1}, {DP: 2, PP: 1, SP: 1, TP: 1},
		} {
			t.Run(fmt.Sprint(fx.Name, "/", plan), func(t *testing.T) {
				x, err := NewExecutor(l.m.Config, l.m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 64, Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				e, err := engine.NewEngine(engine.Options{Exec: x, Sched: sched.Config{MaxNumBatchedTokens: 16}}) // 23- and 30-token prompts in chunks
				if err != nil {
					t.Fatal(err)
				}
				defer e.Start()()
				prompts := [][]int{fixture.Tokens(1, 7, l.m.Config.Vocab), fixture.Tokens(2, 23, l.m.Config.Vocab), fixture.Tokens(3, 30, l.m.Config.Vocab), fixture.Tokens(4, 1, l.m.Config.Vocab)}
				var wg sync.WaitGroup
				wg.Go(func() { // a generation beside them
					if _, err := e.Generate(context.Background(), engine.Request{Prompt: prompts[1], MaxTokens: 6, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}, nil); err != nil {
						t.Error(err)
					}
				})
				for i, p := range prompts {
					wg.Go(func() {
						st, err := e.Submit(engine.Request{ID: fmt.Sprint("emb", i), Prompt: p, MaxTokens: 99, Embed: true})
						if err != nil {
							t.Error(err)
							return
						}
						ev, err := st.Recv(context.Background())
						if err != nil {
							t.Error(err)
							return
						}
						want := l.ref.Hidden(p)[len(p)-1]
						if ev.Finish != engine.FinishStop || len(ev.Tokens) != 0 || ev.Usage.PromptTokens != len(p) || ev.Usage.CompletionTokens != 0 || len(ev.Embedding) != len(want) {
							t.Errorf("prompt %d: event %+v", i, ev)
							return
						}
						if d := oracleRowError(ev.Embedding, want); d > 1e-4 {
							t.Errorf("prompt %d: embedding %.3g from the oracle's (relative to its largest)", i, d)
						}
					})
				}
				wg.Wait()
			})
		}
	}
	// A runner without hidden states refuses embeddings at once.
	l := load(t, fixture.Foundation[0].Spec)
	c, err := NewCSPS(l.m.Config, l.m.Weights, CSPSOptions{Ranks: 2, BlockSize: 4, PerRank: 16, Options: Options{Pool: pool}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.NewEngine(engine.Options{Exec: c})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(engine.Request{Prompt: []int{1, 2}, Embed: true}); !errors.Is(err, engine.ErrNoEmbeddings) {
		t.Fatalf("csps runner: %v, want ErrNoEmbeddings", err)
	}
}
