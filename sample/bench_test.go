package sample

import (
	"slices"
	"testing"
)

// BenchmarkSample measures one Sample call on a Llama-3-sized vocabulary
// (128256) with logits shaped like a language model's (see lmLogits). The
// candidates metric is how many tokens the top-k or top-p path kept aside
// to sort or sample from in the last call.
func BenchmarkSample(b *testing.B) {
	const v = 128256
	logits := lmLogits(v, 7)
	prompt := make([]int, 2000)
	for i := range prompt {
		prompt[i] = (i * 7919) % v
	}
	for _, bc := range []struct {
		name   string
		p      Params
		prompt []int
	}{
		{"greedy", Params{Logprobs: -1}, nil},
		{"temperature", Params{Temperature: 0.8, Logprobs: -1}, nil},
		{"top_p_0.9", Params{Temperature: 0.8, TopP: 0.9, Logprobs: -1}, nil},
		{"top_k_50", Params{Temperature: 0.8, TopK: 50, Logprobs: -1}, nil},
		{"min_p_0.05", Params{Temperature: 0.8, MinP: 0.05, Logprobs: -1}, nil},
		{"logprobs_5", Params{Temperature: 0.8, TopP: 0.9, Logprobs: 5}, nil},
		{"greedy_logprobs_5", Params{Logprobs: 5}, nil},
		// No frequency penalty here: its effect grows with every iteration,
		// so the benchmark would drift away from a steady state.
		{"penalties_prompt_2000", Params{Temperature: 0.8, TopP: 0.9, RepetitionPenalty: 1.1, PresencePenalty: 0.5, Logprobs: -1}, prompt},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bc.p.Seed, bc.p.HasSeed = 1, true
			s, err := New(bc.p, bc.prompt, v)
			if err != nil {
				b.Fatal(err)
			}
			// Sample restores the logits it penalises, so one buffer serves
			// every call without a 512 KB copy per iteration.
			buf := slices.Clone(logits)
			b.ReportAllocs()
			for b.Loop() {
				s.Sample(buf)
			}
			b.ReportMetric(float64(len(s.cands)), "candidates")
		})
	}
}

// TestNoAllocation checks that Sample allocates nothing once its buffers
// have grown, except the Top slice it hands to the caller.
func TestNoAllocation(t *testing.T) {
	const v = 5000
	logits := lmLogits(v, 9)
	for _, tc := range []struct {
		name string
		p    Params
		want float64
	}{
		{"greedy", Params{Logprobs: -1}, 0},
		{"temperature", Params{Temperature: 0.8, Logprobs: -1}, 0},
		{"top_p", Params{Temperature: 0.8, TopP: 0.9, Logprobs: -1}, 0},
		{"top_k", Params{Temperature: 0.8, TopK: 50, Logprobs: -1}, 0},
		{"min_p with chosen logprob", Params{Temperature: 0.8, MinP: 0.1, Logprobs: 0}, 0},
		{"top logprobs", Params{Temperature: 0.8, TopP: 0.9, Logprobs: 5}, 1},
		// Greedy repeats one token, so the penalty state stops growing.
		{"penalties", Params{RepetitionPenalty: 1.2, FrequencyPenalty: 0.1, Logprobs: -1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.p, []int{1, 2, 3}, v)
			if err != nil {
				t.Fatal(err)
			}
			buf := slices.Clone(logits)
			for range 20 {
				s.Sample(buf)
			}
			if got := testing.AllocsPerRun(50, func() { s.Sample(buf) }); got != tc.want {
				t.Fatalf("%v allocations per Sample, want %v", got, tc.want)
			}
		})
	}
}
