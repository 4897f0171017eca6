package engine

import (
	"context"
	"math"
	"testing"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// TestPromptLogprobs asks for prompt log-probabilities through chunked
// prefill (8-token steps), a prefix cache that holds the prompt already,
// and preemptions in a small KV pool, and checks them against the
// log_softmax of one whole-prompt step's logits.
func TestPromptLogprobs(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(2)
	defer pool.Close()
	prompt := m.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.", true)
	n := len(prompt)

	// The reference: every position's logits from one step.
	ref, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 16, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	blocks := make([]int, 16)
	for i := range blocks {
		blocks[i] = i
	}
	logits, err := ref.Step(context.Background(), &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: prompt, Blocks: blocks, NumLogits: n}}}, ref.KVPlacement())
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.Config.Vocab
	want := make([]float64, n)
	for p := 1; p < n; p++ {
		row := logits[(p-1)*vocab : p*vocab]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		sum := 0.0
		for _, v := range row {
			sum += math.Exp(float64(v) - mx)
		}
		want[p] = float64(row[prompt[p]]) - mx - math.Log(sum)
	}

	exec, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{BlockSize: 4, NumBlocks: 14, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	e := startEngine(t, exec, m.Tokenizer, m.EOS(), sched.Config{MaxNumBatchedTokens: 8, EnablePrefixCaching: true})
	// check and run report with t.Errorf: run also runs on goroutines.
	check := func(name string, out *Output, first []sample.Result) {
		t.Helper()
		if len(first) != n-1 {
			t.Errorf("%s: %d prompt log-probabilities for %d tokens", name, len(first), n)
			return
		}
		for p := 1; p < n; p++ {
			r := first[p-1]
			if r.Token != prompt[p] || math.Abs(float64(r.Logprob)-want[p]) > 1e-4 || len(r.Top) != 2 || r.Top[0].Logprob < r.Logprob {
				t.Errorf("%s: prompt token %d: %+v, want token %d logprob %.5f", name, p, r, prompt[p], want[p])
				return
			}
		}
		if out.Usage.CachedTokens != 0 {
			t.Errorf("%s: %d prompt tokens from the prefix cache", name, out.Usage.CachedTokens)
		}
	}
	run := func(name string) {
		st, err := e.Submit(Request{Prompt: prompt, MaxTokens: 20, Sampling: sample.Params{Logprobs: -1}, PromptLogprobs: true, PromptTopLogprobs: 2})
		if err != nil {
			t.Error(err)
			return
		}
		out := &Output{}
		var first []sample.Result
		for {
			ev, err := st.Recv(context.Background())
			if err != nil {
				break
			}
			if first == nil && len(ev.Tokens) > 0 {
				first = ev.PromptLogprobs
			} else if ev.PromptLogprobs != nil {
				t.Errorf("%s: prompt log-probabilities on a later event", name)
			}
			out.Tokens = append(out.Tokens, ev.Tokens...)
			out.Usage = ev.Usage
		}
		check(name, out, first)
	}
	// A plain request caches the prompt's blocks first.
	if _, err := e.Generate(context.Background(), Request{Prompt: prompt, MaxTokens: 4, Sampling: sample.Params{Logprobs: -1}}, nil); err != nil {
		t.Fatal(err)
	}
	run("alone")
	// Three at once in 14 blocks of 4 tokens: they preempt each other.
	done := make(chan struct{})
	for i := range 3 {
		go func() {
			defer func() { done <- struct{}{} }()
			run(string(rune('a' + i)))
		}()
	}
	for range 3 {
		<-done
	}
	if t.Failed() {
		return
	}
	if e.Stats().Preemptions == 0 {
		t.Fatal("no preemption: the test is meant to recompute a prompt")
	}
	if _, err := e.Submit(Request{Prompt: prompt, MaxTokens: 2, PromptLogprobs: true, PromptTopLogprobs: -1}); err == nil {
		t.Fatal("negative prompt top log-probabilities accepted")
	}
}
