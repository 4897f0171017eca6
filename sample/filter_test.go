package sample

import (
	"slices"
	"strings"
	"testing"
)

// TestAllowedTokenIDs: sampling, greedy or not, picks only allowed
// tokens, and the reported log-probabilities stay the raw ones.
func TestAllowedTokenIDs(t *testing.T) {
	const v = 300
	allowed := []int{3, 77, 200, 299}
	for _, temp := range []float32{0, 1} {
		s, err := New(Params{Temperature: temp, AllowedTokenIDs: allowed, Logprobs: 0, Seed: 1, HasSeed: true}, nil, v)
		if err != nil {
			t.Fatal(err)
		}
		if s.PlainGreedy() {
			t.Fatal("PlainGreedy with a filter")
		}
		for _, logits := range stepLogits(40, v) {
			want := logSoftmax(logits)
			r := s.Sample(logits)
			if !slices.Contains(allowed, r.Token) || !closeLogprob(r.Logprob, want[r.Token]) {
				t.Fatalf("temperature %v: %+v", temp, r)
			}
		}
	}
	for _, bad := range [][]int{{}, {-1}, {v}} {
		if _, err := New(Params{AllowedTokenIDs: bad}, nil, v); err == nil {
			t.Errorf("allowed %v accepted", bad)
		}
	}
}

// TestBadWords: a one-token bad word is never generated, and a longer one
// only loses its last token right after the rest of it.
func TestBadWords(t *testing.T) {
	const v = 10
	// Logits that prefer 5, then 6, then the rest.
	logits := func() []float32 {
		l := make([]float32, v)
		l[5], l[6] = 3, 2
		return l
	}
	s, err := New(Params{BadWords: [][]int{{5, 5}, {9}}, Logprobs: -1}, nil, v)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for range 6 {
		got = append(got, s.Sample(logits()).Token)
	}
	// 5, then 5 again would complete [5 5]: 6; after 6, 5 is fine again.
	if want := []int{5, 6, 5, 6, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("bad words [5 5] and [9]: %v, want %v", got, want)
	}
	// Accept (a replayed or forced token) counts as generated.
	s.Accept(5)
	if r := s.Sample(logits()); r.Token != 6 {
		t.Fatalf("after an accepted 5: %d", r.Token)
	}
	l := logits()
	l[9] = 100
	if r := s.Sample(l); r.Token == 9 {
		t.Fatal("the one-token bad word was generated")
	}
	if _, err := New(Params{BadWords: [][]int{{1}, {}}}, nil, v); err == nil || !strings.Contains(err.Error(), "no tokens") {
		t.Fatalf("empty bad word: %v", err)
	}
	if _, err := New(Params{BadWords: [][]int{{v}}}, nil, v); err == nil {
		t.Fatal("bad word outside the vocabulary accepted")
	}
}
