package sample

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestGreedy(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		name   string
		p      Params
		logits []float32
		want   int
	}{
		{"largest", Params{}, []float32{0.1, 2, -3}, 1},
		{"all negative", Params{}, []float32{-5, -1, -2}, 1},
		{"tie takes lowest id", Params{}, []float32{1, 3, 3}, 1},
		{"all equal", Params{}, []float32{7, 7, 7, 7}, 0},
		{"NaN is never chosen", Params{}, []float32{1, nan, 0.5}, 0},
		{"ignores top-k, top-p and min-p", Params{TopK: 1, TopP: 0.01, MinP: 1}, []float32{1, 3, 3}, 1},
		{"applies penalties", Params{RepetitionPenalty: 4}, []float32{1, 3, 2}, 2}, // prompt {1}: 3/4
		{"logit bias", Params{LogitBias: map[int]float32{0: 2.5}}, []float32{1, 3, 2}, 0},
		{"logit bias bans", Params{LogitBias: map[int]float32{1: -100}}, []float32{1, 3, 2}, 2},
		// The bias comes first: 3 + 1 = 4, then the prompt's penalty, 4/4.
		{"logit bias before penalties", Params{RepetitionPenalty: 4, LogitBias: map[int]float32{1: 1}}, []float32{1, 3, 1.5}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.p, []int{1}, len(tt.logits))
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Sample(slices.Clone(tt.logits)).Token; got != tt.want {
				t.Fatalf("Sample = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestTemperatureFloor(t *testing.T) {
	s, err := New(Params{Temperature: 0.001}, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if s.temp != minTemperature {
		t.Fatalf("effective temperature = %v, want %v", s.temp, minTemperature)
	}
}

// distCase is one sampling-distribution check. want, when set, is the
// distribution computed by hand; it is also checked against refDist.
type distCase struct {
	name      string
	p         Params
	logits    []float32
	prompt    []int
	generated []int
	want      []float64
	alt       Params // a plausible bug; its distribution must be rejected
	n         int
}

func TestDistributions(t *testing.T) {
	q4 := logf32(0.5, 0.25, 0.15, 0.1)
	six := []float32{3, 2, 2, 1, 0, -1}
	twelve := []float32{2.5, 2.2, 1.9, 1.9, 1.2, 0.7, 0.3, 0, -0.4, -1, -2, -3.5}
	wide := wideLogits(2500)
	cases := []distCase{
		{name: "temperature 1", p: Params{Temperature: 1}, logits: q4,
			want: []float64{0.5, 0.25, 0.15, 0.1}, alt: Params{Temperature: 0.8}},
		// p ∝ q² = .25, .0625, .0225, .01 (sum .345)
		{name: "temperature 0.5", p: Params{Temperature: 0.5}, logits: q4,
			want: []float64{0.72464, 0.18116, 0.06522, 0.02899}, alt: Params{Temperature: 1}},
		// p ∝ √q = .70711, .5, .38730, .31623 (sum 1.91063)
		{name: "temperature 2", p: Params{Temperature: 2}, logits: q4,
			want: []float64{0.37009, 0.26169, 0.20271, 0.16551}, alt: Params{Temperature: 1}},
		// The 2nd largest logit is 2, held by ids 1 and 2: both kept.
		// p ∝ e³, e², e² = 20.0855, 7.3891, 7.3891 (sum 34.8637)
		{name: "top_k keeps ties with the k-th", p: Params{Temperature: 1, TopK: 2}, logits: six,
			want: []float64{0.57612, 0.21194, 0.21194, 0, 0, 0}, alt: Params{Temperature: 1}},
		{name: "top_k 1 with a tie", p: Params{Temperature: 1, TopK: 1}, logits: []float32{1, 5, 5, 2},
			want: []float64{0, 0.5, 0.5, 0}, alt: Params{Temperature: 1}},
		// cumulative before each: 0, .5 (< .7 kept), .75 (dropped)
		{name: "top_p 0.7", p: Params{Temperature: 1, TopP: 0.7}, logits: q4,
			want: []float64{2.0 / 3, 1.0 / 3, 0, 0}, alt: Params{Temperature: 1}},
		{name: "top_p 0.8", p: Params{Temperature: 1, TopP: 0.8}, logits: q4,
			want: []float64{0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0}, alt: Params{Temperature: 1}},
		// Four equal weights: the first two reach top_p .5 exactly, which
		// counts as reached (vLLM drops ascending cumsum <= 1 - top_p);
		// ties rank by id.
		{name: "top_p boundary is inclusive", p: Params{Temperature: 1, TopP: 0.5}, logits: []float32{0, 0, 0, 0},
			want: []float64{0.5, 0.5, 0, 0}, alt: Params{Temperature: 1, TopP: 0.75}},
		// threshold .25·.5 = .125 drops .1
		{name: "min_p 0.25", p: Params{Temperature: 1, MinP: 0.25}, logits: q4,
			want: []float64{0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0}, alt: Params{Temperature: 1}},
		// min-p acts after temperature: at T=.5 the probabilities are
		// .725, .181, .065, .029 and the threshold .0725 keeps two
		// (.25 : .0625 = .8 : .2); at T=1 min_p .1 would keep all four.
		{name: "min_p after temperature", p: Params{Temperature: 0.5, MinP: 0.1}, logits: q4,
			want: []float64{0.8, 0.2, 0, 0}, alt: Params{Temperature: 1, MinP: 0.1}},
		// top-k 4 keeps e³, e², e², e¹ → .53444, .19661, .19661, .07233;
		// top-p .72 then keeps two (.53444 + .19661 = .73105 ≥ .72). Over
		// all six tokens top-p .72 would keep three (.5157 + .1897 < .72).
		{name: "top_k then top_p", p: Params{Temperature: 1, TopK: 4, TopP: 0.72}, logits: six,
			want: []float64{0.73106, 0.26894, 0, 0, 0, 0}, alt: Params{Temperature: 1, TopP: 0.72}},
		{name: "everything", p: Params{Temperature: 0.8, TopK: 8, TopP: 0.9, MinP: 0.02}, logits: twelve,
			alt: Params{Temperature: 0.8}},
		{name: "penalties then everything", p: Params{Temperature: 0.8, TopK: 8, TopP: 0.9, MinP: 0.02,
			RepetitionPenalty: 1.3, FrequencyPenalty: 0.4, PresencePenalty: 0.3},
			logits: twelve, prompt: []int{0, 1, 9}, generated: []int{0, 4, 4, 2},
			alt: Params{Temperature: 0.8, TopK: 8, TopP: 0.9, MinP: 0.02}, n: 40000},
		{name: "temperature across chunks", p: Params{Temperature: 0.9}, logits: wide,
			alt: Params{Temperature: 1}, n: 12000},
		{name: "min_p across chunks", p: Params{Temperature: 0.9, MinP: 0.05}, logits: wide,
			alt: Params{Temperature: 0.9}, n: 12000},
		{name: "top_p across chunks", p: Params{Temperature: 0.9, TopP: 0.8}, logits: wide,
			alt: Params{Temperature: 0.9}, n: 12000},
		{name: "top_k across chunks", p: Params{Temperature: 0.9, TopK: 6}, logits: wide,
			alt: Params{Temperature: 0.9}, n: 12000},
		// p ∝ q·e^bias: .5, .25·e, .15, .1/e = .5, .67957, .15, .03679 (sum 1.36636)
		{name: "logit bias", p: Params{Temperature: 1, LogitBias: map[int]float32{1: 1, 3: -1}}, logits: q4,
			want: []float64{0.36594, 0.49736, 0.10978, 0.02692}, alt: Params{Temperature: 1}},
		{name: "logit bias, penalties, then everything", p: Params{Temperature: 0.8, TopK: 8, TopP: 0.9, MinP: 0.02,
			RepetitionPenalty: 1.3, FrequencyPenalty: 0.4, LogitBias: map[int]float32{5: 2, 0: -1.5, 11: 100}},
			logits: twelve, prompt: []int{0, 1, 9}, generated: []int{0, 4, 4, 2},
			alt: Params{Temperature: 0.8, TopK: 8, TopP: 0.9, MinP: 0.02, RepetitionPenalty: 1.3, FrequencyPenalty: 0.4}, n: 40000},
		// The top token holds 73% and every other sits 9 nats below: the
		// nucleus reaches past the first prefilter depth of 8 nats and
		// takes the lowest ids of the tied tail.
		{name: "top_p beyond the first prefilter", p: Params{Temperature: 1, TopP: 0.9}, logits: plateau(3000, -9),
			alt: Params{Temperature: 1}, n: 12000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := refDist(tc.p, tc.logits, tc.prompt, tc.generated)
			if tc.want != nil {
				for i := range want {
					if math.Abs(want[i]-tc.want[i]) > 1e-4 {
						t.Fatalf("refDist = %v, hand-computed %v", want, tc.want)
					}
				}
			}
			alt := refDist(tc.alt, tc.logits, tc.prompt, tc.generated)
			n := tc.n
			if n == 0 {
				n = 200000
			}
			counts := drawMany(t, tc.p, tc.logits, tc.prompt, tc.generated, n)
			checkDistribution(t, counts, n, want, alt)
		})
	}
}

// drawMany samples n times from the same state: from one seeded sampler
// when no penalty is on, else from a fresh sampler for each draw (seed i
// for draw i) that has seen the prompt and the generated tokens (a sampler
// that kept sampling would keep changing its own penalties).
func drawMany(t *testing.T, p Params, logits []float32, prompt, generated []int, n int) []int {
	t.Helper()
	p.Logprobs = -1
	seeded := func(seed int64) *Sampler {
		q := p
		q.Seed, q.HasSeed = seed, true
		s, err := New(q, prompt, len(logits))
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range generated {
			s.Accept(tok)
		}
		return s
	}
	s := seeded(20240601)
	counts := make([]int, len(logits))
	buf := make([]float32, len(logits))
	for i := range n {
		copy(buf, logits)
		d := s
		if s.pen.track {
			d = seeded(int64(i))
		}
		counts[d.Sample(buf).Token]++
	}
	return counts
}

// wideLogits spreads eight likely tokens over the chunks of a vocabulary
// of 2500 (ids on both sides of the chunk boundaries at 1024 and 2048)
// above a tail of N(-5, 1) logits.
func wideLogits(v int) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, v)
	for i := range x {
		x[i] = float32(r.NormFloat64() - 5)
	}
	for i, id := range []int{3, 700, 1023, 1024, 1500, 2047, 2048, 2499} {
		x[id] = 2.5 - 0.4*float32(i)
	}
	return x
}

// plateau is logit 0 for token 0 and tail for every other token.
func plateau(v int, tail float32) []float32 {
	x := make([]float32, v)
	for i := 1; i < v; i++ {
		x[i] = tail
	}
	return x
}

// TestInverseCDF checks the full-vocabulary path exactly: for a grid of
// draws u, the token must be the one where the cumulative distribution, in
// id order, passes u (except within 1e-5 of a step).
func TestInverseCDF(t *testing.T) {
	wide := wideLogits(2500)
	for _, p := range []Params{
		{Temperature: 0.7},
		{Temperature: 1.5, MinP: 0.001},
	} {
		s, err := New(p, nil, len(wide))
		if err != nil {
			t.Fatal(err)
		}
		want := refDist(p, wide, nil, nil)
		cdf := make([]float64, len(want))
		var acc float64
		for i, q := range want {
			acc += q
			cdf[i] = acc
		}
		for k := range 4000 {
			u := (float64(k) + 0.5) / 4000
			i, _ := slices.BinarySearch(cdf, u)
			if math.Abs(cdf[i]-u) < 1e-5 || (i > 0 && math.Abs(cdf[i-1]-u) < 1e-5) {
				continue
			}
			if got := s.draw(slices.Clone(wide), u); got != i {
				t.Fatalf("%+v: draw(u=%v) = %d, want %d", p, u, got, i)
			}
		}
	}
}

// TestTopPFallback drives the top-p prefilter to its deeper rounds: one
// token at 0 and a tail tied further down, with top_p so close to 1 that
// the nucleus needs part of the tail. The draw u → 1 must land on the last
// token of the nucleus (the highest id of the kept tail), and u = 0 on the
// top token. The last case makes the finite depths too shallow, so that
// only the final round, every token, holds the nucleus.
func TestTopPFallback(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		name  string
		tail  float32
		topP  float32
		depth [len(prefilterNats)]float32
	}{
		{"second round", -9, 0.9, prefilterNats},
		{"third round", -20, 0.999999, prefilterNats},
		{"every token", -9, 0.9, [...]float32{0.5, 1, 2, inf}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(saved [len(prefilterNats)]float32) { prefilterNats = saved }(prefilterNats)
			prefilterNats = tc.depth
			logits := plateau(3000, tc.tail)
			p := Params{Temperature: 1, TopP: tc.topP}
			want := refDist(p, logits, nil, nil)
			last := 0
			for i, q := range want {
				if q > 0 {
					last = i
				}
			}
			if last == 0 || last == len(logits)-1 {
				t.Fatalf("the nucleus should hold part of the tail, ends at %d", last)
			}
			s, err := New(p, nil, len(logits))
			if err != nil {
				t.Fatal(err)
			}
			if got := s.draw(slices.Clone(logits), math.Nextafter(1, 0)); got != last {
				t.Errorf("draw(u→1) = %d, want the nucleus's last token %d", got, last)
			}
			if got := s.draw(slices.Clone(logits), 0); got != 0 {
				t.Errorf("draw(0) = %d, want 0", got)
			}
		})
	}
}

func TestSeedDeterminism(t *testing.T) {
	p := Params{Temperature: 0.9, TopP: 0.95, TopK: 40, FrequencyPenalty: 0.3, RepetitionPenalty: 1.1, Seed: 7, HasSeed: true}
	steps := stepLogits(300, 1000)
	a := run(t, mustNew(t, p), steps)
	b := run(t, mustNew(t, p), steps)
	if !slices.Equal(a, b) {
		t.Fatal("two samplers with the same seed diverged")
	}
	p.Seed = 8
	if c := run(t, mustNew(t, p), steps); slices.Equal(a, c) {
		t.Fatal("seeds 7 and 8 gave the same 300 tokens")
	}
	p.HasSeed = false
	if d, e := run(t, mustNew(t, p), steps), run(t, mustNew(t, p), steps); slices.Equal(d, e) {
		t.Fatal("two unseeded samplers gave the same 300 tokens")
	}
}

// TestSeedGolden pins the tokens of one seeded sequence, so a change to
// the random stream or the sampling arithmetic that would change users'
// seeded outputs shows up here.
func TestSeedGolden(t *testing.T) {
	p := Params{Temperature: 1, TopP: 0.9, Seed: 1234, HasSeed: true}
	got := run(t, mustNew(t, p), stepLogits(16, 1000))
	want := []int{278, 321, 92, 101, 832, 630, 898, 445, 98, 319, 144, 441, 542, 236, 215, 967}
	if !slices.Equal(got, want) {
		t.Fatalf("seed 1234 tokens = %v, want %v", got, want)
	}
}

// TestReseed checks that Reseed gives the stream of a fresh sampler with
// that seed.
func TestReseed(t *testing.T) {
	p := Params{Temperature: 1.1, MinP: 0.01, PresencePenalty: 0.5, RepetitionPenalty: 1.2, Seed: 99, HasSeed: true}
	steps := stepLogits(50, 1000)
	q := p
	q.Seed = 5
	fresh := run(t, mustNew(t, q), steps)
	r := mustNew(t, p)
	r.Reseed(5)
	if got := run(t, r, steps); !slices.Equal(got, fresh) {
		t.Fatal("Reseed(5) differs from New with seed 5")
	}
}

func TestAcceptDoesNotDraw(t *testing.T) {
	p := Params{Temperature: 1, Seed: 3, HasSeed: true}
	steps := stepLogits(20, 1000)
	a := mustNew(t, p)
	b := mustNew(t, p)
	for i := range 5 {
		b.Accept(i)
	}
	if !slices.Equal(run(t, a, steps), run(t, b, steps)) {
		t.Fatal("Accept without penalties changed the choices")
	}
}

func TestNonFinite(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	ninf := float32(math.Inf(-1))
	modes := map[string]Params{
		"greedy":      {},
		"temperature": {Temperature: 1},
		"top_k":       {Temperature: 1, TopK: 2},
		"top_p":       {Temperature: 1, TopP: 0.9},
		"min_p":       {Temperature: 1, MinP: 0.5},
	}
	tests := []struct {
		name   string
		logits []float32
		prompt []int
		rep    float32
		allow  []int // tokens that may be drawn; all must appear
		greedy int   // the greedy choice
	}{
		{name: "all NaN", logits: []float32{nan, nan, nan}, allow: []int{0}, greedy: 0},
		{name: "all -Inf", logits: []float32{ninf, ninf, ninf}, allow: []int{0}, greedy: 0},
		{name: "NaN among finite", logits: []float32{nan, 0, nan, 0.1, ninf}, allow: []int{1, 3}, greedy: 3},
		{name: "+Inf wins, uniformly", logits: []float32{5, nan, inf, 7, ninf, inf}, allow: []int{2, 5}, greedy: 2},
		// Repetition penalty 2 overflows -3e38 to -Inf, so no penalised
		// logit is left: fall back to the largest raw logit.
		{name: "penalties leave only -Inf", logits: []float32{ninf, -3e38, nan, -3.1e38}, prompt: []int{1, 3}, rep: 2, allow: []int{1}, greedy: 1},
	}
	for _, tt := range tests {
		for mode, p := range modes {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				p.RepetitionPenalty = tt.rep
				p.Logprobs = 2
				s, err := New(p, tt.prompt, len(tt.logits))
				if err != nil {
					t.Fatal(err)
				}
				allow := tt.allow
				if p.Temperature == 0 {
					allow = []int{tt.greedy}
				}
				seen := map[int]bool{}
				for range 200 {
					r := s.Sample(slices.Clone(tt.logits))
					if !slices.Contains(allow, r.Token) {
						t.Fatalf("drew %d, want one of %v", r.Token, allow)
					}
					if math.IsNaN(float64(r.Logprob)) || len(r.Top) != 2 {
						t.Fatalf("result %+v: NaN logprob or short Top", r)
					}
					seen[r.Token] = true
				}
				if len(seen) != len(allow) {
					t.Fatalf("drew %v, want every one of %v", seen, allow)
				}
			})
		}
	}
}

// TestLargeVocabulary runs every path on a 152064-token vocabulary with
// logits shaped like a language model's and checks each draw against the
// exact distribution.
func TestLargeVocabulary(t *testing.T) {
	const v = 152064
	logits := lmLogits(v, 11)
	prompt := []int{1, 2, 3, 151000, 152063}
	for _, p := range []Params{
		{},
		{Temperature: 1},
		{Temperature: 0.7, TopP: 0.9},
		{Temperature: 0.7, TopK: 50},
		{Temperature: 0.7, MinP: 0.05},
		{Temperature: 1.3, TopK: 100, TopP: 0.95, MinP: 0.01, RepetitionPenalty: 1.1, FrequencyPenalty: 0.2},
	} {
		p.Logprobs = 5
		p.Seed, p.HasSeed = 42, true
		want := refDist(p, logits, prompt, nil)
		s, err := New(p, prompt, v)
		if err != nil {
			t.Fatal(err)
		}
		r := s.Sample(slices.Clone(logits))
		if r.Token < 0 || r.Token >= v || want[r.Token] == 0 {
			t.Fatalf("%+v: drew %d, outside the support", p, r.Token)
		}
		if !(r.Logprob <= 0) || len(r.Top) != 5 || r.Top[0].Logprob < r.Logprob {
			t.Fatalf("%+v: implausible logprobs %+v", p, r)
		}
	}
}

// lmLogits imitates a language model's output: a bulk of N(-2, 2.5²)
// logits and a few dozen plausible tokens far above it.
func lmLogits(v int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0))
	x := make([]float32, v)
	for i := range x {
		x[i] = float32(2.5*r.NormFloat64() - 2)
	}
	for range 40 {
		x[r.IntN(v)] = float32(14 + 3*r.NormFloat64())
	}
	return x
}

// stepLogits returns n logits vectors of size v, one per decoding step.
func stepLogits(n, v int) [][]float32 {
	steps := make([][]float32, n)
	for i := range steps {
		steps[i] = lmLogits(v, uint64(i))
	}
	return steps
}

func mustNew(t *testing.T, p Params, prompt ...int) *Sampler {
	t.Helper()
	s, err := New(p, prompt, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run samples one token per step and returns them.
func run(t *testing.T, s *Sampler, steps [][]float32) []int {
	t.Helper()
	out := make([]int, len(steps))
	for i, l := range steps {
		out[i] = s.Sample(slices.Clone(l)).Token
	}
	return out
}

func TestPlainGreedy(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want bool
	}{
		{Params{Logprobs: -1}, true},
		{Params{Logprobs: -1, RepetitionPenalty: 1}, true},
		{Params{Logprobs: 0}, false},
		{Params{Logprobs: -1, Temperature: 0.5}, false},
		{Params{Logprobs: -1, RepetitionPenalty: 1.1}, false},
		{Params{Logprobs: -1, PresencePenalty: 0.5}, false},
		{Params{Logprobs: -1, FrequencyPenalty: -0.5}, false},
	} {
		s, err := New(tc.p, []int{1, 2}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.PlainGreedy(); got != tc.want {
			t.Errorf("%+v: PlainGreedy = %v, want %v", tc.p, got, tc.want)
		}
		if !tc.want {
			continue
		}
		logits := []float32{0, 3, -1, 3, float32(math.NaN()), 2, 0, 0, 0, 0}
		if got := s.Sample(logits).Token; got != 1 {
			t.Errorf("%+v: plain greedy sample = %d, want the lowest argmax 1", tc.p, got)
		}
	}
}

// TestLogitBias: the bias moves the choice but not the reported raw
// log-probabilities, leaves the caller's logits as it found them apart
// from what Sample may do anyway, turns off the device argmax shortcut,
// and bad ids or values are refused as logit_bias errors.
func TestLogitBias(t *testing.T) {
	logits := []float32{1, 3, 2}
	plain, _ := New(Params{Logprobs: 2}, nil, 3)
	biased, err := New(Params{Logprobs: 2, LogitBias: map[int]float32{0: 5, 2: 0}}, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	a, b := plain.Sample(slices.Clone(logits)), biased.Sample(slices.Clone(logits))
	if a.Token != 1 || b.Token != 0 {
		t.Fatalf("tokens %d without and %d with a bias of 5 on token 0, want 1 and 0", a.Token, b.Token)
	}
	// log_softmax(1, 3, 2) at token 0: 1 − ln(e + e³ + e²) = −2.40761.
	if math.Abs(float64(b.Logprob)+2.40761) > 1e-4 || !slices.Equal(a.Top, b.Top) {
		t.Errorf("with the bias: logprob %v, top %v; want the raw −2.40761 and the unbiased top %v", b.Logprob, b.Top, a.Top)
	}
	greedy := func(bias map[int]float32) bool {
		s, err := New(Params{Logprobs: -1, LogitBias: bias}, nil, 3)
		if err != nil {
			t.Fatal(err)
		}
		return s.PlainGreedy()
	}
	if !greedy(nil) || greedy(map[int]float32{0: 5}) {
		t.Error("PlainGreedy must be off with a logit bias")
	}
	if !greedy(map[int]float32{1: 0}) {
		t.Error("a zero bias turned PlainGreedy off")
	}
	for _, bad := range []map[int]float32{{3: 1}, {-1: 1}, {0: 100.5}, {1: float32(math.NaN())}} {
		if _, err := New(Params{LogitBias: bad}, nil, 3); !errors.Is(err, ErrLogitBias) {
			t.Errorf("logit_bias %v: %v", bad, err)
		}
	}
	if _, err := New(Params{LogitBias: map[int]float32{0: -100, 2: 100}}, nil, 3); err != nil {
		t.Errorf("the bounds ±100: %v", err)
	}
}

// fakeConstraint allows only the tokens in allow and records what it was
// told was chosen.
type fakeConstraint struct {
	allow    []int
	accepted []int
}

func (f *fakeConstraint) Mask(logits []float32) {
	for id := range logits {
		if !slices.Contains(f.allow, id) {
			logits[id] = float32(math.Inf(-1))
		}
	}
}

func (f *fakeConstraint) Accept(token int) { f.accepted = append(f.accepted, token) }

// TestConstrain: the constraint masks before anything else, so greedy and
// random choices stay among its tokens and the reported log-probabilities
// are over them (vLLM's structured output); it hears of every token,
// sampled or accepted; and a constrained sampler never hands its argmax
// to the device.
func TestConstrain(t *testing.T) {
	logits := []float32{5, 1, 2, 0}
	c := &fakeConstraint{allow: []int{1, 2}}
	s, err := New(Params{Logprobs: -1}, nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	plain := s.PlainGreedy()
	s.Constrain(c)
	if !plain || s.PlainGreedy() {
		t.Errorf("PlainGreedy %v before the constraint, %v after", plain, s.PlainGreedy())
	}
	if tok := s.Sample(slices.Clone(logits)).Token; tok != 2 {
		t.Errorf("greedy under the constraint chose %d, want 2", tok)
	}
	s.Accept(1)
	if !slices.Equal(c.accepted, []int{2, 1}) {
		t.Errorf("the constraint heard %v, want [2 1]", c.accepted)
	}
	r, _ := New(Params{Temperature: 1, Logprobs: 0, Seed: 5, HasSeed: true}, nil, 4)
	r.Constrain(&fakeConstraint{allow: []int{1, 2}})
	for range 200 {
		res := r.Sample(slices.Clone(logits))
		// Over tokens 1 and 2 alone: log(e^l / (e + e²)).
		want := float64(logits[res.Token]) - math.Log(math.E+math.E*math.E)
		if res.Token != 1 && res.Token != 2 || math.Abs(float64(res.Logprob)-want) > 1e-5 {
			t.Fatalf("drew %d with logprob %v, want 1 or 2 with %v", res.Token, res.Logprob, want)
		}
	}
}

// TestSuppressUntil: min_tokens' mask keeps the suppressed tokens out of
// the first n tokens, sampled or accepted, then lets them back; the
// reported log-probabilities stay the raw ones.
func TestSuppressUntil(t *testing.T) {
	for _, temp := range []float32{0, 1} {
		s, err := New(Params{Temperature: temp, Logprobs: 0}, nil, 4)
		if err != nil {
			t.Fatal(err)
		}
		s.SuppressUntil([]int{2, 2, 9, -1}, 3)                        // duplicates and ids outside the vocabulary are ignored
		logits := func() []float32 { return []float32{0, 1, 12, -1} } // token 2 all but certain
		s.Accept(1)
		for i := 1; i < 3; i++ {
			l := logits()
			res := s.Sample(l)
			if res.Token == 2 {
				t.Fatalf("temperature %v: token %d is the suppressed one", temp, i)
			}
			if raw := logits(); math.Abs(float64(res.Logprob)-float64(rawLogprob(raw, res.Token))) > 1e-5 {
				t.Errorf("temperature %v: logprob %v, want the raw %v", temp, res.Logprob, rawLogprob(raw, res.Token))
			}
		}
		if res := s.Sample(logits()); res.Token != 2 {
			t.Errorf("temperature %v: after 3 tokens got %d, want the suppressed token back", temp, res.Token)
		}
	}
	g, err := New(Params{Logprobs: -1}, nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	g.SuppressUntil([]int{2}, 1)
	if g.PlainGreedy() {
		t.Error("PlainGreedy while suppressing")
	}
	g.Accept(0)
	if !g.PlainGreedy() {
		t.Error("not PlainGreedy after the suppression")
	}
}

// rawLogprob is log softmax(logits)[tok].
func rawLogprob(logits []float32, tok int) float32 {
	var m float64 = math.Inf(-1)
	for _, x := range logits {
		m = math.Max(m, float64(x))
	}
	var z float64
	for _, x := range logits {
		z += math.Exp(float64(x) - m)
	}
	return float32(float64(logits[tok]) - m - math.Log(z))
}
