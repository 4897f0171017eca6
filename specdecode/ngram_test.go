package specdecode

import (
	"slices"
	"strings"
	"testing"
)

func TestNGramPropose(t *testing.T) {
	cases := []struct {
		tokens    []int
		lo, hi, k int
		want      []int
	}{
		{[]int{1, 2, 3, 4, 1, 2, 3, 5, 6}, 2, 2, 2, nil},
		{[]int{1, 2, 3, 4, 1, 2, 3}, 2, 2, 3, []int{4, 1, 2}},
		{[]int{1, 2, 3, 4, 1, 2, 3}, 2, 2, 2, []int{4, 1}},
		{[]int{1, 2, 3, 4, 1, 2, 3}, 1, 1, 3, []int{4, 1, 2}},
		{[]int{1, 3, 6, 2, 3, 4, 1, 2, 3}, 2, 2, 3, []int{4, 1, 2}},
		{[]int{1, 3, 6, 2, 3, 4, 1, 2, 3}, 1, 1, 2, []int{6, 2}},                           // the first occurrence
		{[]int{1, 2, 3, 4, 1, 2, 3}, 4, 4, 2, nil},                                         // no 4-gram
		{[]int{1, 2, 3, 4, 1, 2, 3}, 3, 4, 2, []int{4, 1}},                                 // a 3-gram
		{[]int{2, 3, 4, 5, 1, 2, 3, 4, 1, 2, 3, 4}, 3, 4, 2, []int{1, 2}},                  // the 4-gram, not the earlier 3-gram
		{[]int{3, 4, 5, 2, 3, 4, 1, 2, 3, 4}, 2, 4, 2, []int{1, 2}},                        // the 3-gram, not the earlier 2-gram
		{[]int{1, 2, 3, 100, 1, 2, 3, 200, 1, 2, 3, 300, 1, 2, 3}, 3, 3, 2, []int{100, 1}}, // the first of several
		{[]int{1, 2, 3, 1, 2}, 2, 2, 5, []int{3, 1, 2}},                                    // cut at the sequence's end
		{[]int{7, 7, 7, 7}, 1, 3, 4, []int{7}},                                             // the 3-gram ending at 3 is first
		{nil, 2, 2, 2, nil},
		{[]int{5}, 1, 1, 2, nil},
		{[]int{1, 2, 1, 2}, 1, 2, 0, nil},
	}
	for _, c := range cases {
		g, err := NewNGram(Config{Method: "ngram", NumTokens: max(c.k, 1), LookupMin: c.lo, LookupMax: c.hi})
		if err != nil {
			t.Fatal(err)
		}
		got := g.Propose(nil, c.tokens, c.k)
		if !slices.Equal(got, c.want) {
			t.Errorf("Propose(%v, n=[%d,%d], k=%d) = %v, want %v", c.tokens, c.lo, c.hi, c.k, got, c.want)
		}
	}
}

// TestNGramProposeBrute checks Propose against a direct search on random
// sequences over a small alphabet.
func TestNGramProposeBrute(t *testing.T) {
	seed := uint64(1)
	next := func() int { seed = seed*6364136223846793005 + 1442695040888963407; return int(seed >> 61) }
	for trial := range 2000 {
		tokens := make([]int, trial%40)
		for i := range tokens {
			tokens[i] = next()
		}
		lo := 1 + trial%3
		hi := lo + trial%4
		g, _ := NewNGram(Config{Method: "ngram", NumTokens: 4, LookupMin: lo, LookupMax: hi})
		got := g.Propose(nil, tokens, 4)
		var want []int
	search:
		for n := hi; n >= lo; n-- {
			if n >= len(tokens) {
				continue
			}
			suffix := tokens[len(tokens)-n:]
			for start := 0; start+n < len(tokens); start++ {
				if slices.Equal(tokens[start:start+n], suffix) {
					want = tokens[start+n : min(start+n+4, len(tokens))]
					break search
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Propose(%v, [%d,%d]) = %v, want %v", tokens, lo, hi, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	c, err := Parse(`{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}`)
	if err != nil {
		t.Fatal(err)
	}
	if c != (Config{Method: "ngram", NumTokens: 4, LookupMin: 3, LookupMax: 3}) {
		t.Errorf("Parse = %+v", c)
	}
	if c, _ := Parse(`{"method": "[ngram]", "num_speculative_tokens": 2}`); c.LookupMin != 5 || c.LookupMax != 5 || c.Method != "ngram" {
		t.Errorf("defaults: %+v", c)
	}
	for _, in := range []string{
		`{"model": "/m/draft", "num_speculative_tokens": 5}`, // older vLLM: a model and no method
		`{"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 5, "draft_tensor_parallel_size": 1}`,
	} {
		c, err := Parse(in)
		if err != nil || c != (Config{Method: DraftModel, NumTokens: 5, Model: "/m/draft", DraftTP: 1}) {
			t.Errorf("Parse(%s) = %+v, %v", in, c, err)
		}
		if _, err := NewNGram(c); err == nil {
			t.Errorf("NewNGram(%+v) proposes by n-grams", c)
		}
		if back, err := Parse(c.String()); err != nil || back != c {
			t.Errorf("Parse(String()) = %+v, %v; want %+v", back, err, c)
		}
	}
	for in, want := range map[string]string{
		`{"num_speculative_tokens": 2}`:                                                     `"method" is required`,
		`{"method": "eagle", "num_speculative_tokens": 2}`:                                  `"eagle" is not supported`,
		`{"method": "draft_model", "num_speculative_tokens": 2}`:                            `needs the draft model's directory`,
		`{"model": "d", "num_speculative_tokens": 2, "prompt_lookup_max": 3}`:               `options of method "ngram"`,
		`{"model": "d", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 2}`:      `only 1 is supported`,
		`{"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1}`: `options of method "draft_model"`,
		`{"method": "ngram"}`:                                                                              `"num_speculative_tokens" must be in [1, 32], got 0`,
		`{"method": "ngram", "num_speculative_tokens": 33}`:                                                `got 33`,
		`{"method": "ngram", "num_speculative_tokens": 2, "model": "x"}`:                                   `options of method "draft_model"`,
		`{"method": "ngram", "num_speculative_tokens": 2, "temperature": 1}`:                               `unknown field "temperature"`,
		`{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2}`: `<= "prompt_lookup_max" (2)`,
		`{"method": "ngram", "num_speculative_tokens": 2} {}`:                                              `trailing data`,
		`[1]`: `cannot unmarshal array`,
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", in, err, want)
		}
	}
}

// BenchmarkNGramPropose drafts for a 4,096-token sequence whose suffix
// repeats a span from its middle.
func BenchmarkNGramPropose(b *testing.B) {
	tokens := make([]int, 4096)
	for i := range tokens {
		tokens[i] = (i * 7919) % 32000
	}
	copy(tokens[4096-64:], tokens[2000:2064])
	g, _ := NewNGram(Config{Method: "ngram", NumTokens: 5, LookupMin: 3, LookupMax: 5})
	dst := make([]int, 0, 8)
	for b.Loop() {
		dst = g.Propose(dst[:0], tokens, 5)
	}
	if len(dst) != 5 {
		b.Fatalf("drafted %v", dst)
	}
}
