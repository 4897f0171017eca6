package sample

import (
	"math"
	"slices"
	"testing"
)

// logSoftmax is the float64 reference for raw log-probabilities.
func logSoftmax(logits []float32) []float64 {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - mx)
	}
	out := make([]float64, len(logits))
	for i, l := range logits {
		out[i] = float64(l) - mx - math.Log(sum)
	}
	return out
}

func closeLogprob(got float32, want float64) bool {
	return math.Abs(float64(got)-want) <= 2e-6+1e-6*math.Abs(want)
}

// TestLogprobsRaw checks that Logprob and Top are log_softmax of the logits
// as given, untouched by the penalties, temperature and truncation that
// decided the token.
func TestLogprobsRaw(t *testing.T) {
	const v = 5000
	p := Params{Temperature: 0.6, TopK: 20, MinP: 0.01, RepetitionPenalty: 1.5, FrequencyPenalty: 1, PresencePenalty: 1, Logprobs: 5, Seed: 1, HasSeed: true}
	steps := stepLogits(50, v)
	prompt := []int{}
	for _, l := range steps[:3] {
		_, best := maxIndex(l)
		prompt = append(prompt, best)
	}
	s, err := New(p, prompt, v)
	if err != nil {
		t.Fatal(err)
	}
	for step, l := range steps {
		want := logSoftmax(l)
		r := s.Sample(slices.Clone(l))
		if !closeLogprob(r.Logprob, want[r.Token]) {
			t.Fatalf("step %d: logprob of %d = %v, want %v", step, r.Token, r.Logprob, want[r.Token])
		}
		order := make([]int, v)
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			switch {
			case want[a] > want[b]:
				return -1
			case want[a] < want[b]:
				return 1
			}
			return 0
		})
		if len(r.Top) != 5 {
			t.Fatalf("step %d: %d top logprobs, want 5", step, len(r.Top))
		}
		for i, lp := range r.Top {
			if lp.Token != order[i] || !closeLogprob(lp.Logprob, want[order[i]]) {
				t.Fatalf("step %d: Top[%d] = %+v, want {%d %v}", step, i, lp, order[i], want[order[i]])
			}
		}
	}
}

func TestLogprobsTop(t *testing.T) {
	logits := []float32{1, 3, 3, 2, 3}
	ref := logSoftmax(logits)
	tests := []struct {
		name     string
		logprobs int
		wantTop  []int // nil: no Top
		wantLP   bool  // Result.Logprob set
	}{
		{"none", -1, nil, false},
		{"chosen only", 0, nil, true},
		{"ties by id", 3, []int{1, 2, 4}, true},
		{"more than the vocabulary", 10, []int{1, 2, 4, 3, 0}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Params{Logprobs: tt.logprobs}, nil, len(logits))
			if err != nil {
				t.Fatal(err)
			}
			r := s.Sample(slices.Clone(logits))
			if r.Token != 1 {
				t.Fatalf("greedy token = %d, want 1", r.Token)
			}
			if got := r.Logprob != 0; got != tt.wantLP || (tt.wantLP && !closeLogprob(r.Logprob, ref[1])) {
				t.Fatalf("Logprob = %v, want set=%v (%v)", r.Logprob, tt.wantLP, ref[1])
			}
			var ids []int
			for _, lp := range r.Top {
				ids = append(ids, lp.Token)
				if !closeLogprob(lp.Logprob, ref[lp.Token]) {
					t.Fatalf("Top logprob of %d = %v, want %v", lp.Token, lp.Logprob, ref[lp.Token])
				}
			}
			if !slices.Equal(ids, tt.wantTop) {
				t.Fatalf("Top tokens = %v, want %v", ids, tt.wantTop)
			}
		})
	}
}

func TestLogprobsNonFinite(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	ninf := float32(math.Inf(-1))
	ln := func(x float64) float32 { return float32(math.Log(x)) }
	tests := []struct {
		name   string
		logits []float32
		want   []float32 // log-probability of each token
	}{
		{"NaN counts as -Inf", []float32{0, nan, 0, ninf}, []float32{ln(0.5), ninf, ln(0.5), ninf}},
		{"uniform over +Inf", []float32{inf, 3, nan, inf}, []float32{ln(0.5), ninf, ninf, ln(0.5)}},
		{"nothing above -Inf: uniform", []float32{nan, ninf, nan, ninf}, []float32{ln(0.25), ln(0.25), ln(0.25), ln(0.25)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Params{Temperature: 1, Logprobs: 4}, nil, len(tt.logits))
			if err != nil {
				t.Fatal(err)
			}
			r := s.Sample(slices.Clone(tt.logits))
			if r.Logprob != tt.want[r.Token] {
				t.Fatalf("Logprob of %d = %v, want %v", r.Token, r.Logprob, tt.want[r.Token])
			}
			for _, lp := range r.Top {
				if lp.Logprob != tt.want[lp.Token] {
					t.Fatalf("Top logprob of %d = %v, want %v", lp.Token, lp.Logprob, tt.want[lp.Token])
				}
			}
		})
	}
}

// TestLogprobOf checks a prompt token's log-probability and top list
// against log_softmax, and that the logits are left as they were.
func TestLogprobOf(t *testing.T) {
	const v = 3000
	logits := stepLogits(1, v)[0]
	orig := slices.Clone(logits)
	want := logSoftmax(logits)
	for _, tok := range []int{0, 17, v - 1} {
		r := LogprobOf(logits, tok, 3)
		rank := 1
		for _, v := range want {
			if v > want[tok] {
				rank++
			}
		}
		if r.Token != tok || !closeLogprob(r.Logprob, want[tok]) || len(r.Top) != 3 || r.Rank != rank {
			t.Fatalf("LogprobOf(%d) = %+v, want logprob %v, rank %d", tok, r, want[tok], rank)
		}
		for i, alt := range r.Top {
			if !closeLogprob(alt.Logprob, want[alt.Token]) || (i > 0 && alt.Logprob > r.Top[i-1].Logprob) {
				t.Fatalf("top %d: %+v", i, alt)
			}
		}
		if _, best := maxIndex(orig); r.Top[0].Token != best {
			t.Fatalf("top token %d, argmax %d", r.Top[0].Token, best)
		}
	}
	if r := LogprobOf(logits, 5, 0); r.Top != nil || !closeLogprob(r.Logprob, want[5]) {
		t.Fatalf("top 0: %+v", r)
	}
	if !slices.Equal(logits, orig) {
		t.Fatal("LogprobOf changed the logits")
	}
}
