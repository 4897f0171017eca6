package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
	"github.com/gearboxlm/gearbox/tokenizer"
)

// TestEngineBatchingMatchesAlone runs 12 requests at once through a small
// KV pool (so the scheduler batches, chunks and preempts) under the shift
// policy, and checks every output equals the same request run alone.
func TestEngineBatchingMatchesAlone(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(2)
	defer pool.Close()
	prompts := []string{"Once upon a time", "The cat", "Lily and Ben went to the park", "One day", "A big dog"}
	var reqs []Request
	for i := 0; i < 12; i++ {
		p := m.Tokenizer.Encode(prompts[i%len(prompts)], true)
		params := sample.Params{Logprobs: -1}
		if i%3 == 1 {
			params = sample.Params{Temperature: 0.9, TopP: 0.9, Seed: int64(i), HasSeed: true, Logprobs: -1}
		}
		reqs = append(reqs, Request{ID: fmt.Sprint("r", i), Prompt: p, MaxTokens: 40 + 7*i, Sampling: params, IgnoreEOS: true})
	}
	alone, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	ref := startEngine(t, alone, m.Tokenizer, m.EOS(), sched.Config{})
	want := make([]*Output, len(reqs))
	for i, r := range reqs {
		if want[i], err = ref.Generate(context.Background(), r, nil); err != nil {
			t.Fatal(err)
		}
	}

	base := parallel.Plan{DP: 1, PP: 1, SP: 2, TP: 2}
	pol, _ := policy.NewShift(base, 8)
	exec, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{Placements: pol.Placements(), BlockSize: 16, NumBlocks: 20, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(Options{Exec: exec, Policy: pol, Tokenizer: m.Tokenizer, EOS: m.EOS(), Sched: sched.Config{MaxNumBatchedTokens: 24, EnablePrefixCaching: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Start()()

	got := generateAll(t, e, reqs)
	for i := range reqs {
		if got[i] == nil {
			t.Fatalf("request %d failed", i)
		}
		if got[i].Text != want[i].Text || len(got[i].Tokens) != len(want[i].Tokens) {
			t.Fatalf("request %d batched:\n%q\nalone:\n%q", i, got[i].Text, want[i].Text)
		}
	}
	st := e.Stats()
	if st.Preemptions == 0 || st.PrefixHits == 0 || st.PlanSteps["tp=4"] == 0 || st.PlanSteps["sp=2,tp=2"] == 0 {
		t.Fatalf("expected preemptions, prefix hits and both plans: %+v", st)
	}
	if st.Running != 0 || st.Waiting != 0 || st.KVUsage != 0 {
		t.Fatalf("engine not idle: %+v", st)
	}
}

func TestEngineAbortAndDrain(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	exec, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 64})
	if err != nil {
		t.Fatal(err)
	}
	e := startEngine(t, exec, m.Tokenizer, m.EOS(), sched.Config{})
	p := m.Tokenizer.Encode("Once upon a time", true)
	st, err := e.Submit(Request{Prompt: p, MaxTokens: 400, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !e.Abort(st.ID()) {
		t.Fatal("abort of a live request returned false")
	}
	var last Event
	for {
		ev, err := st.Recv(context.Background())
		if err != nil {
			break
		}
		last = ev
	}
	if last.Finish != FinishCancelled {
		t.Fatalf("last event %+v", last)
	}
	idle := e.Drain()
	<-idle
	if _, err := e.Submit(Request{Prompt: p, MaxTokens: 4}); err == nil {
		t.Fatal("submit while draining succeeded")
	}
	if s := e.Stats(); s.KVUsage != 0 || s.Running != 0 {
		t.Fatalf("after abort: %+v", s)
	}
}

// hostGreedy is a GreedyRunner over the CPU executor that takes the argmax
// on the host and counts which path the engine used.
type hostGreedy struct {
	*cpuexec.Executor
	greedySteps, logitSteps int
}

func (h *hostGreedy) Step(ctx context.Context, b *forward.Batch, plan parallel.Placement) ([]float32, error) {
	h.logitSteps++
	return h.Executor.Step(ctx, b, plan)
}

func (h *hostGreedy) StepGreedy(ctx context.Context, b *forward.Batch, plan parallel.Placement) ([]int, error) {
	h.greedySteps++
	logits, err := h.Executor.Step(ctx, b, plan)
	if err != nil {
		return nil, err
	}
	vocab := h.Config().Vocab
	out := make([]int, len(logits)/vocab)
	for i := range out {
		out[i] = tensor.MaxIndex(logits[i*vocab : (i+1)*vocab])
	}
	return out, nil
}

// TestGreedyRunner: steps whose sampled sequences are all plain greedy go
// through StepGreedy, others through Step, and the text is the same.
func TestGreedyRunner(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(2)
	defer pool.Close()
	x, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	r := &hostGreedy{Executor: x}
	e, err := NewEngine(Options{Exec: r, Tokenizer: m.Tokenizer, EOS: m.EOS()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Start()()
	prompt := m.Tokenizer.Encode("Once upon a time", true)
	plain, err := e.Generate(context.Background(), Request{Prompt: prompt, MaxTokens: 30, Sampling: sample.Params{Logprobs: -1}, IgnoreEOS: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.greedySteps == 0 || r.logitSteps != 0 {
		t.Fatalf("plain greedy: %d greedy steps, %d logits steps; want only greedy", r.greedySteps, r.logitSteps)
	}
	withLogprobs, err := e.Generate(context.Background(), Request{Prompt: prompt, MaxTokens: 30, Sampling: sample.Params{Logprobs: 1}, IgnoreEOS: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.logitSteps == 0 {
		t.Fatal("greedy with logprobs did not use Step")
	}
	if plain.Text != withLogprobs.Text {
		t.Fatalf("texts differ:\n%q\n%q", plain.Text, withLogprobs.Text)
	}
}

// generateAll runs reqs on e at once and returns their outputs; a failed
// request is reported with t.Error and has a nil output.
func generateAll(t testing.TB, e *Engine, reqs []Request) []*Output {
	outs := make([]*Output, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			out, err := e.Generate(context.Background(), r, nil)
			if err != nil {
				t.Error(err)
				return
			}
			outs[i] = out
		})
	}
	wg.Wait()
	return outs
}

// startEngine runs an engine loop over exec until the test ends.
func startEngine(t testing.TB, exec Runner, tok *tokenizer.Tokenizer, eos []int, cfg sched.Config) *Engine {
	t.Helper()
	e, err := NewEngine(Options{Exec: exec, Tokenizer: tok, EOS: eos, Sched: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Start())
	return e
}
