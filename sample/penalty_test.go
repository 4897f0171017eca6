package sample

import (
	"slices"
	"testing"
)

// TestPenalties checks the penalised logits against values computed by
// hand from vLLM's formulas.
//
// logits 2, -1, 0.5, 3, 0, 1; prompt 0, 1, 1, 4; generated 3, 3, 2, so
// count(3) = 2 and count(2) = 1.
func TestPenalties(t *testing.T) {
	logits := []float32{2, -1, 0.5, 3, 0, 1}
	prompt := []int{0, 1, 1, 4}
	generated := []int{3, 3, 2}
	tests := []struct {
		name string
		p    Params
		want []float32
	}{
		{"none", Params{}, []float32{2, -1, 0.5, 3, 0, 1}},
		{"repetition unset (0) is off", Params{RepetitionPenalty: 0}, []float32{2, -1, 0.5, 3, 0, 1}},
		{"repetition 1 is off", Params{RepetitionPenalty: 1}, []float32{2, -1, 0.5, 3, 0, 1}},
		// prompt ∪ generated = {0,1,2,3,4}: positive /2, others ×2.
		{"repetition 2", Params{RepetitionPenalty: 2}, []float32{1, -2, 0.25, 1.5, 0, 1}},
		{"repetition 0.5", Params{RepetitionPenalty: 0.5}, []float32{4, -0.5, 1, 6, 0, 1}},
		// generated only: 3 → 3 - 0.5·2, 2 → 0.5 - 0.5·1.
		{"frequency 0.5", Params{FrequencyPenalty: 0.5}, []float32{2, -1, 0, 2, 0, 1}},
		{"frequency -1", Params{FrequencyPenalty: -1}, []float32{2, -1, 1.5, 5, 0, 1}},
		// generated only, once per token whatever the count.
		{"presence 0.25", Params{PresencePenalty: 0.25}, []float32{2, -1, 0.25, 2.75, 0, 1}},
		{"presence -2", Params{PresencePenalty: -2}, []float32{2, -1, 2.5, 5, 0, 1}},
		// repetition first, then frequency and presence:
		// 2: 0.5/2 - 0.5 - 0.25 = -0.5; 3: 3/2 - 1 - 0.25 = 0.25.
		{"all three", Params{RepetitionPenalty: 2, FrequencyPenalty: 0.5, PresencePenalty: 0.25}, []float32{1, -2, -0.5, 0.25, 0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.p, prompt, len(logits))
			if err != nil {
				t.Fatal(err)
			}
			for _, tok := range generated {
				s.Accept(tok)
			}
			got := slices.Clone(logits)
			s.pen.apply(got)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("penalised logits = %v, want %v", got, tt.want)
			}
			s.pen.restore(got)
			if !slices.Equal(got, logits) {
				t.Fatalf("restored logits = %v, want %v", got, logits)
			}
		})
	}
}

// TestPenaltiesSteerGreedy checks end to end that Sample records its own
// choices: with logits 1.0 and 0.9 and frequency penalty 0.2, greedy
// alternates as each choice pushes its token below the other.
//
//	step 1: 1.0 vs 0.9 → 0
//	step 2: 1.0-0.2 = 0.8 vs 0.9 → 1
//	step 3: 0.8 vs 0.9-0.2 = 0.7 → 0
//	step 4: 1.0-0.4 = 0.6 vs 0.7 → 1
func TestPenaltiesSteerGreedy(t *testing.T) {
	tests := []struct {
		name   string
		p      Params
		prompt []int
		want   []int
	}{
		{"frequency", Params{FrequencyPenalty: 0.2}, nil, []int{0, 1, 0, 1}},
		// presence 0.2: after both appear, penalties are equal: 0.8 vs 0.7.
		{"presence", Params{PresencePenalty: 0.2}, nil, []int{0, 1, 0, 0}},
		// repetition 2 on prompt token 0: 0.5 vs 0.9 → 1, then 0.5 vs 0.45 → 0.
		{"repetition over prompt", Params{RepetitionPenalty: 2}, []int{0}, []int{1, 0, 0, 0}},
		{"no penalty", Params{}, []int{0}, []int{0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.p, tt.prompt, 2)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for range tt.want {
				got = append(got, s.Sample([]float32{1.0, 0.9}).Token)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("tokens = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSampleRestoresLogits pins what BenchmarkSample relies on: although
// the contract lets Sample modify logits, it restores the ones it
// penalised.
func TestSampleRestoresLogits(t *testing.T) {
	logits := lmLogits(3000, 4)
	s, err := New(Params{Temperature: 1, TopP: 0.9, RepetitionPenalty: 1.3, PresencePenalty: 1, Logprobs: 3}, []int{5, 6, 7}, len(logits))
	if err != nil {
		t.Fatal(err)
	}
	buf := slices.Clone(logits)
	for range 20 {
		s.Sample(buf)
		if !slices.Equal(buf, logits) {
			t.Fatal("Sample left the logits modified")
		}
	}
}
