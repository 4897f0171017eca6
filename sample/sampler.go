package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// minTemperature is the smallest non-zero temperature; smaller ones are
// raised to it, as vLLM does.
const minTemperature = 0.01

// Logprob is one token's log-probability.
type Logprob struct {
	Token   int
	Logprob float32
}

// Result is the outcome of one Sample call.
//
// Logprob and Top are set only when Params.Logprobs >= 0. They are the
// "raw" log-probabilities vLLM v1 reports by default: log_softmax of the
// logits given to Sample, before penalties and temperature, so they do not
// depend on the sampling parameters. A NaN logit counts as -Inf, and
// log-probabilities of -Inf are reported as -Inf (never NaN); a JSON layer
// must clamp them (vLLM writes -9999.0). If some logits are +Inf, the
// distribution is uniform over them; if none is above -Inf, it is uniform
// over the vocabulary.
type Result struct {
	Token   int
	Logprob float32   // of Token
	Top     []Logprob // the Params.Logprobs most likely tokens, logprob descending then id ascending; freshly allocated, nil when Params.Logprobs <= 0
	Rank    int       // set by LogprobOf only: 1 + the number of tokens with a larger raw logit
}

// Constraint restricts the tokens a sequence may generate (structured
// output, package structured). It is stateful: one per sequence.
type Constraint interface {
	// Mask sets to -Inf the logits of the tokens that may not come next.
	Mask(logits []float32)
	// Accept follows the token that was chosen.
	Accept(token int)
}

// Sampler turns one sequence's next-token logits into a token. It holds the
// sequence's sampling state: the random stream, the prompt tokens and the
// counts of generated tokens that the penalties need, and scratch buffers
// reused by every call so that Sample does not allocate.
//
// A Sampler belongs to one sequence and is not safe for concurrent use;
// distinct Samplers share nothing and may run in parallel.
type Sampler struct {
	vocab   int
	temp    float32 // effective temperature; 0 means greedy
	invT    float32 // 1/temp
	topK    int     // 0 means off
	topP    float32 // 1 means off
	minP    float32 // 0 means off
	logMinP float64 // ln(minP)
	nTop    int     // Params.Logprobs, at most vocab; -1 means none

	rng  rand.PCG
	pen  penalties
	bias logitBias
	filt filter     // allowed_token_ids, bad_words
	con  Constraint // nil: any token

	// The tokens masked while fewer than suppressFor tokens are generated
	// (SuppressUntil), and the tokens generated so far.
	suppress    []int
	suppressFor int
	generated   int
	saved       []float32 // the suppressed logits, restored after the draw

	// Scratch, sized once.
	chunk  []float32 // chunkLen weights of one chunk of the vocabulary
	blocks []float64 // total weight of each chunk
	cands  []cand    // top-k heap, or the candidates for top-p or +Inf logits
	top    []cand    // the best raw logits, for Result.Top
}

// New returns the sampler for one sequence with the given parameters,
// prompt token ids and vocabulary size (the length of every logits slice).
// Invalid parameters return Validate's error unchanged, so it can be shown
// to the API client; an empty vocabulary or an out-of-range prompt token
// is an error too.
func New(p Params, prompt []int, vocab int) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if vocab < 1 || vocab > math.MaxInt32 {
		return nil, fmt.Errorf("sample: vocabulary size must be in [1, 2^31), got %d", vocab)
	}
	for i, t := range prompt {
		if t < 0 || t >= vocab {
			return nil, fmt.Errorf("sample: prompt token %d at position %d is outside the vocabulary [0, %d)", t, i, vocab)
		}
	}
	bias, err := newLogitBias(p.LogitBias, vocab)
	if err != nil {
		return nil, err
	}
	filt, err := newFilter(p.AllowedTokenIDs, p.BadWords, vocab)
	if err != nil {
		return nil, err
	}
	s := &Sampler{
		vocab:  vocab,
		temp:   p.Temperature,
		topK:   p.TopK,
		topP:   p.TopP,
		minP:   p.MinP,
		nTop:   min(p.Logprobs, vocab),
		chunk:  make([]float32, chunkLen),
		blocks: make([]float64, (vocab+chunkLen-1)/chunkLen),
		bias:   bias,
		filt:   filt,
	}
	if s.temp > 0 {
		s.temp = max(s.temp, minTemperature)
		s.invT = 1 / s.temp
	}
	if s.topK <= 0 || s.topK >= vocab {
		s.topK = 0
	}
	if s.topP == 0 {
		s.topP = 1
	}
	if s.minP > 0 {
		s.logMinP = math.Log(float64(s.minP))
	}
	rep := p.RepetitionPenalty
	if rep == 0 {
		rep = 1
	}
	s.pen = newPenalties(rep, p.FrequencyPenalty, p.PresencePenalty, prompt)
	if p.HasSeed {
		s.Reseed(p.Seed)
	} else {
		s.rng.Seed(rand.Uint64(), rand.Uint64())
	}
	return s, nil
}

// Sample chooses the next token from logits (one float32 per vocabulary
// id), records it for the penalties and returns it with its
// log-probabilities. The pipeline is vLLM v1's: the constraint's mask
// (Constrain); raw log-probabilities; the allowed tokens and bad words (Params); min_tokens' mask (SuppressUntil); the logit bias; repetition, frequency and presence penalties; then either greedy argmax
// or temperature, min-p, top-k, top-p and a draw from the renormalised
// distribution. NaN logits count as -Inf. If every penalised logit is -Inf
// or NaN, Sample returns the token with the largest raw logit (the lowest
// id on ties, 0 if none is above -Inf).
//
// Sample may modify logits in place; the caller must not rely on their
// contents afterwards. It panics if len(logits) differs from the vocabulary
// size given to New, which is a bug in the caller, not a request error. A
// random choice consumes exactly one draw from the sampler's stream;
// greedy consumes none.
func (s *Sampler) Sample(logits []float32) Result {
	if len(logits) != s.vocab {
		panic(fmt.Sprintf("sample: Sample got %d logits for a vocabulary of %d", len(logits), s.vocab))
	}
	if s.con != nil {
		s.con.Mask(logits)
	}
	var raw rawDist
	if s.nTop >= 0 {
		raw = s.rawDist(logits)
	}
	if s.filt.on() {
		s.filt.apply(logits)
	}
	suppressing := s.generated < s.suppressFor
	if suppressing {
		for i, id := range s.suppress {
			s.saved[i], logits[id] = logits[id], negInf
		}
	}
	s.bias.apply(logits)
	s.pen.apply(logits)
	var tok int
	if s.temp == 0 {
		_, tok = maxIndex(logits)
	} else {
		tok = s.draw(logits, s.uniform())
	}
	s.pen.restore(logits)
	s.bias.restore(logits)
	if suppressing {
		for i, id := range s.suppress {
			logits[id] = s.saved[i]
		}
	}
	if tok < 0 {
		_, tok = maxIndex(logits)
		tok = max(tok, 0)
	}
	res := Result{Token: tok}
	if s.nTop >= 0 {
		res.Logprob = raw.logprob(logits[tok])
		res.Top = raw.topList(s.top, s.nTop)
	}
	s.pen.record(tok)
	s.filt.record(tok)
	s.generated++
	if s.con != nil {
		s.con.Accept(tok)
	}
	return res
}

// SuppressUntil masks tokens (an end-of-sequence token, stop token ids)
// while fewer than n tokens have been generated, sampled or accepted:
// vLLM's min_tokens. Ids outside the vocabulary are ignored. The reported
// log-probabilities stay the raw ones.
func (s *Sampler) SuppressUntil(tokens []int, n int) {
	s.suppress = s.suppress[:0]
	for _, id := range tokens {
		if id >= 0 && id < s.vocab && !slices.Contains(s.suppress, id) {
			s.suppress = append(s.suppress, id)
		}
	}
	s.suppressFor = n
	s.saved = make([]float32, len(s.suppress))
}

// Constrain holds the sampler's choices to c from the next Sample on: c
// masks the logits first (so the reported log-probabilities are those of
// the allowed tokens, as vLLM's structured output reports them) and
// follows every token chosen or accepted.
func (s *Sampler) Constrain(c Constraint) { s.con = c }

// PlainGreedy reports whether Sample is the argmax of the raw logits (the
// lowest id on ties) and nothing more: greedy, with no constraint, no
// logit bias, no penalties, no token filters and no log-probabilities. A
// backend may then pick the token
// where the logits are and hand it to Accept.
func (s *Sampler) PlainGreedy() bool {
	return s.temp == 0 && s.nTop < 0 && !s.pen.track && len(s.bias.entries) == 0 && s.con == nil && s.generated >= s.suppressFor && !s.filt.on()
}

// Accept records token as generated without sampling, for tokens chosen
// elsewhere (forced, or replayed after preemption). It does not advance
// the random stream. It panics if token is outside the vocabulary, which
// is a bug in the caller.
func (s *Sampler) Accept(token int) {
	if token < 0 || token >= s.vocab {
		panic(fmt.Sprintf("sample: Accept got token %d outside the vocabulary [0, %d)", token, s.vocab))
	}
	s.pen.record(token)
	s.filt.record(token)
	s.generated++
	if s.con != nil {
		s.con.Accept(token)
	}
}

// Reseed restarts the random stream at the start of seed's stream, the
// one New gives to Params{Seed: seed, HasSeed: true}. The penalty state is
// kept.
func (s *Sampler) Reseed(seed int64) {
	u := uint64(seed)
	s.rng.Seed(splitmix64(u), splitmix64(u^0x6a09e667f3bcc909))
}

// uniform returns the next number of the stream, uniform in [0, 1).
func (s *Sampler) uniform() float64 {
	return float64(s.rng.Uint64()>>11) * 0x1p-53
}

// splitmix64 is SplitMix64's output function, used to spread a user seed
// over the 128-bit PCG state.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
