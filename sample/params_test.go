package sample

import (
	"math"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	tests := []struct {
		name string
		p    Params
		want string // substring of the error; "" means valid
	}{
		{"zero value", Params{}, ""},
		{"defaults", DefaultParams(), ""},
		{"everything on", Params{Temperature: 0.7, TopK: 50, TopP: 0.9, MinP: 0.05, PresencePenalty: -2, FrequencyPenalty: 2, RepetitionPenalty: 1.3, Logprobs: 20}, ""},
		{"top_k -1 is off", Params{TopK: -1}, ""},
		{"top_p 1", Params{TopP: 1}, ""},
		{"min_p 1", Params{MinP: 1}, ""},
		{"logprobs -1", Params{Logprobs: -1}, ""},
		{"negative temperature", Params{Temperature: -0.5}, "temperature must be a finite number >= 0, got -0.5"},
		{"NaN temperature", Params{Temperature: nan}, "temperature must be a finite number >= 0, got NaN"},
		{"infinite temperature", Params{Temperature: inf}, "temperature must be a finite number >= 0, got +Inf"},
		{"top_k -2", Params{TopK: -2}, "top_k must be -1 or 0 (off) or at least 1, got -2"},
		{"top_p above 1", Params{TopP: 1.5}, "top_p must be in (0, 1], got 1.5"},
		{"top_p negative", Params{TopP: -0.1}, "top_p must be in (0, 1], got -0.1"},
		{"top_p NaN", Params{TopP: nan}, "top_p must be in (0, 1], got NaN"},
		{"min_p above 1", Params{MinP: 1.01}, "min_p must be in [0, 1], got 1.01"},
		{"min_p negative", Params{MinP: -0.01}, "min_p must be in [0, 1], got -0.01"},
		{"presence too big", Params{PresencePenalty: 2.5}, "presence_penalty must be in [-2, 2], got 2.5"},
		{"presence NaN", Params{PresencePenalty: nan}, "presence_penalty must be in [-2, 2], got NaN"},
		{"frequency too small", Params{FrequencyPenalty: -3}, "frequency_penalty must be in [-2, 2], got -3"},
		{"repetition negative", Params{RepetitionPenalty: -1}, "repetition_penalty must be a finite number > 0, got -1"},
		{"repetition infinite", Params{RepetitionPenalty: inf}, "repetition_penalty must be a finite number > 0, got +Inf"},
		{"logprobs -2", Params{Logprobs: -2}, "logprobs must be -1 (none) or >= 0, got -2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want %q", err, tt.want)
			}
			// New reports the same error, unchanged.
			_, nerr := New(tt.p, nil, 10)
			if (err == nil) != (nerr == nil) || (err != nil && err.Error() != nerr.Error()) {
				t.Fatalf("New() error = %v, Validate() = %v", nerr, err)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name   string
		prompt []int
		vocab  int
		want   string
	}{
		{"empty vocabulary", nil, 0, "vocabulary size must be in [1, 2^31), got 0"},
		{"prompt token too big", []int{1, 2, 10}, 10, "prompt token 10 at position 2 is outside the vocabulary [0, 10)"},
		{"negative prompt token", []int{-1}, 10, "prompt token -1 at position 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(DefaultParams(), tt.prompt, tt.vocab)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestContractPanics(t *testing.T) {
	s, err := New(DefaultParams(), nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"Sample wrong length": func() { s.Sample(make([]float32, 3)) },
		"Accept out of range": func() { s.Accept(4) },
		"Accept negative":     func() { s.Accept(-1) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}
