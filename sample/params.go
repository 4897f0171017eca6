package sample

import (
	"errors"
	"fmt"
	"math"
)

// Params are one request's sampling parameters, with vLLM's and the OpenAI
// API's meanings. The zero value is valid: every field's zero means "off"
// or "unset", which gives greedy decoding with no penalties, reporting the
// chosen token's log-probability. DefaultParams gives the OpenAI defaults
// instead (temperature 1, no log-probabilities).
type Params struct {
	// Temperature divides the logits before sampling. 0 means greedy:
	// the token with the largest penalised logit, the lowest id on ties;
	// greedy decoding ignores TopK, TopP and MinP. As in vLLM, a
	// temperature in (0, 0.01) is raised to 0.01. Must be finite and >= 0.
	Temperature float32

	// TopK keeps the TopK most likely tokens and every token tied with the
	// TopK-th (vLLM keeps ties). 0, -1 or >= the vocabulary size: off.
	TopK int

	// TopP keeps the smallest set of most likely tokens whose probability
	// sums to at least TopP, and always at least one. Must be in (0, 1];
	// 1 is off, and 0 means unset and is treated as 1.
	TopP float32

	// MinP drops tokens whose probability is below MinP times that of the
	// most likely token. Must be in [0, 1]; 0 is off.
	MinP float32

	// Seed, when HasSeed is set, makes the sequence of choices a function
	// of the seed and the logits alone. Without HasSeed the sampler draws
	// its seed from the Go runtime's random source.
	Seed    int64
	HasSeed bool

	// PresencePenalty is subtracted from the logit of every token generated
	// at least once (OpenAI semantics; prompt tokens do not count).
	// Must be in [-2, 2]; 0 is off.
	PresencePenalty float32

	// FrequencyPenalty times the number of times a token has been
	// generated is subtracted from its logit (OpenAI semantics; prompt
	// tokens do not count). Must be in [-2, 2]; 0 is off.
	FrequencyPenalty float32

	// RepetitionPenalty divides the positive logits and multiplies the
	// others of every token in the prompt or generated so far (Hugging Face
	// and vLLM semantics). Must be finite and > 0; 1 is off, and 0 means
	// unset and is treated as 1.
	RepetitionPenalty float32

	// Logprobs is the number of most likely alternatives to report in
	// Result.Top. 0 reports only the chosen token's log-probability; -1
	// reports nothing. Values above the vocabulary size report all tokens.
	Logprobs int

	// LogitBias is added to the logits of the tokens it names before the
	// penalties and the choice (OpenAI's logit_bias; vLLM applies it at
	// the same point). Each bias must be in [-100, 100]; -100 in effect
	// bans a token and 100 forces it. The reported log-probabilities stay
	// the raw ones. Token ids must be inside the vocabulary (New).
	LogitBias map[int]float32

	// AllowedTokenIDs, when not nil, are the only tokens that may be
	// generated (vLLM's allowed_token_ids); it must not be empty.
	AllowedTokenIDs []int

	// BadWords are token sequences that may not be generated: the last
	// token of one is banned wherever the tokens generated so far end with
	// the rest of it, and a one-token sequence always (vLLM's bad_words,
	// which the API layer tokenizes). Both filters apply before the logit
	// bias and the penalties, after the raw log-probabilities.
	BadWords [][]int
}

// MaxLogitBias bounds the magnitude of a LogitBias entry, as OpenAI does.
const MaxLogitBias = 100

// ErrLogitBias marks an invalid LogitBias, so an API layer can name the
// field.
var ErrLogitBias = errors.New("logit_bias")

// DefaultParams returns the OpenAI API defaults: temperature 1, no top-k,
// top-p or min-p, no penalties, no log-probabilities, unseeded.
func DefaultParams() Params {
	return Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1, Logprobs: -1}
}

// Validate reports the first invalid field, naming it as the OpenAI API
// does, for example "top_p must be in (0, 1], got 1.5".
func (p Params) Validate() error {
	switch {
	case !finite(p.Temperature) || p.Temperature < 0:
		return fmt.Errorf("temperature must be a finite number >= 0, got %v", p.Temperature)
	case p.TopK < -1:
		return fmt.Errorf("top_k must be -1 or 0 (off) or at least 1, got %d", p.TopK)
	case !(p.TopP >= 0 && p.TopP <= 1):
		return fmt.Errorf("top_p must be in (0, 1], got %v", p.TopP)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("min_p must be in [0, 1], got %v", p.MinP)
	case !(p.PresencePenalty >= -2 && p.PresencePenalty <= 2):
		return fmt.Errorf("presence_penalty must be in [-2, 2], got %v", p.PresencePenalty)
	case !(p.FrequencyPenalty >= -2 && p.FrequencyPenalty <= 2):
		return fmt.Errorf("frequency_penalty must be in [-2, 2], got %v", p.FrequencyPenalty)
	case !finite(p.RepetitionPenalty) || p.RepetitionPenalty < 0:
		return fmt.Errorf("repetition_penalty must be a finite number > 0, got %v", p.RepetitionPenalty)
	case p.Logprobs < -1:
		return fmt.Errorf("logprobs must be -1 (none) or >= 0, got %d", p.Logprobs)
	}
	for tok, b := range p.LogitBias {
		if !(b >= -MaxLogitBias && b <= MaxLogitBias) {
			return fmt.Errorf("%w: the bias of token %d must be in [%d, %d], got %v", ErrLogitBias, tok, -MaxLogitBias, MaxLogitBias, b)
		}
	}
	return nil
}

func finite(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }
