package engine

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// The reference greedy run of stories260K from llama2.c (see
// model/builtin/stories260K/README.md).
var (
	storiesPrompt    = []int{1, 403, 407, 261, 378}
	storiesFirstIDs  = []int{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}
	storiesReference = `Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.
Lily's mom said, "Lily, let's go to the park."`
)

func TestStoriesReference(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	ids := m.Tokenizer.Encode("Once upon a time", true)
	if !slices.Equal(ids, storiesPrompt) {
		t.Fatalf("prompt ids = %v, want %v", ids, storiesPrompt)
	}
	pool := tensor.NewPool(2)
	defer pool.Close()
	r, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	g := startEngine(t, r, m.Tokenizer, m.EOS(), sched.Config{})
	var streamed strings.Builder
	want := strings.TrimPrefix(storiesReference, "Once upon a time")
	out, err := g.Generate(context.Background(), Request{Prompt: ids, MaxTokens: 200, Sampling: sample.Params{Logprobs: -1}}, func(s string) { streamed.WriteString(s) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Tokens[:len(storiesFirstIDs)], storiesFirstIDs) {
		t.Fatalf("first ids = %v, want %v", out.Tokens[:len(storiesFirstIDs)], storiesFirstIDs)
	}
	if !strings.HasPrefix(out.Text, want) {
		t.Fatalf("text = %q, want it to start with %q", out.Text, want)
	}
	if streamed.String() != out.Text {
		t.Fatalf("streamed text %q differs from the final text %q", streamed.String(), out.Text)
	}
	if out.FinishReason != FinishLength || len(out.Tokens) != 200 {
		t.Fatalf("finish %s after %d tokens, want length after 200", out.FinishReason, len(out.Tokens))
	}
	if full := m.Tokenizer.Decode(append(append([]int{}, ids...), out.Tokens...), true); full != "Once upon a time"+out.Text {
		t.Fatalf("decode(prompt+completion) = %q, want prompt + %q", full, out.Text)
	}
}

func TestStopStringsAndTokens(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := startEngine(t, r, m.Tokenizer, m.EOS(), sched.Config{})
	ids := m.Tokenizer.Encode("Once upon a time", true)
	greedy := sample.Params{Logprobs: -1}

	var streamed strings.Builder
	out, err := g.Generate(context.Background(), Request{Prompt: ids, MaxTokens: 100, Sampling: greedy, Stop: []string{"Lily."}}, func(s string) { streamed.WriteString(s) })
	if err != nil {
		t.Fatal(err)
	}
	if out.Text != ", there was a little girl named " || out.FinishReason != FinishStop || streamed.String() != out.Text {
		t.Fatalf("stop string: text %q streamed %q finish %s", out.Text, streamed.String(), out.FinishReason)
	}

	out, err = g.Generate(context.Background(), Request{Prompt: ids, MaxTokens: 100, Sampling: greedy, StopTokenIDs: []int{storiesFirstIDs[3]}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Tokens) != 4 || out.FinishReason != FinishStop || out.Text != ", there was" {
		t.Fatalf("stop token: tokens %v text %q finish %s", out.Tokens, out.Text, out.FinishReason)
	}

	// include_stop_str_in_output keeps the stop string.
	out, err = g.Generate(context.Background(), Request{Prompt: ids, MaxTokens: 100, Sampling: greedy, Stop: []string{"Lily."}, IncludeStop: true}, nil)
	if err != nil || out.Text != ", there was a little girl named Lily." || out.FinishReason != FinishStop {
		t.Fatalf("stop string kept: text %q finish %s, %v", out.Text, out.FinishReason, err)
	}
	// min_tokens: the stop token cannot come among the first 6 tokens, nor
	// a stop string end the text before them.
	stop := storiesFirstIDs[3]
	out, err = g.Generate(context.Background(), Request{Prompt: ids, MaxTokens: 40, MinTokens: 6, Sampling: greedy, StopTokenIDs: []int{stop}}, nil)
	if err != nil || len(out.Tokens) < 7 || slices.Contains(out.Tokens[:6], stop) || out.FinishReason == FinishStop && out.Tokens[len(out.Tokens)-1] != stop {
		t.Fatalf("min_tokens 6 with stop token %d: tokens %v finish %s, %v", stop, out.Tokens, out.FinishReason, err)
	}
	out, err = g.Generate(context.Background(), Request{Prompt: ids, MaxTokens: 30, MinTokens: 30, Sampling: greedy, Stop: []string{"Lily."}}, nil)
	if err != nil || len(out.Tokens) != 30 || out.FinishReason != FinishLength || !strings.Contains(out.Text, "Lily.") {
		t.Fatalf("min_tokens 30 with a stop string: %d tokens, text %q finish %s, %v", len(out.Tokens), out.Text, out.FinishReason, err)
	}
	if _, err := g.Generate(context.Background(), Request{Prompt: ids, MaxTokens: 3, MinTokens: 4, Sampling: greedy}, nil); err == nil {
		t.Fatal("min_tokens above max_tokens: no error")
	}

	out, err = g.Generate(context.Background(), Request{Prompt: ids, MaxTokens: 3, Sampling: sample.Params{Logprobs: 2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Logprobs) != 3 || len(out.Logprobs[0].Top) != 2 || out.Logprobs[0].Top[0].Token != storiesFirstIDs[0] {
		t.Fatalf("logprobs = %+v", out.Logprobs)
	}

	long := make([]int, m.Config.MaxPositions)
	if _, err := g.Generate(context.Background(), Request{Prompt: long, MaxTokens: 1, Sampling: greedy}, nil); err == nil || !strings.Contains(err.Error(), "prompt too long") {
		t.Fatalf("over-long prompt: err = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Generate(ctx, Request{Prompt: ids, MaxTokens: 5, Sampling: greedy}, nil); err == nil {
		t.Fatal("cancelled context: no error")
	}
}
