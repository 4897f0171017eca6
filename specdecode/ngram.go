// Package specdecode proposes draft tokens for speculative decoding: a
// decode step runs a sequence's last token and k drafts at once, and the
// engine keeps the drafts the model would have chosen itself, plus the
// model's own token at the first one it would not. The output is the same
// as without drafts; only the number of steps changes.
//
// The one method here is vLLM's "ngram" (prompt lookup decoding): the
// draft is what followed an earlier occurrence of the sequence's last few
// tokens. It costs no model and pays off where outputs copy their
// context: code edits, extraction, summaries, structured output.
package specdecode

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MaxTokens is the largest number of draft tokens a step may carry per
// sequence.
const MaxTokens = 32

// Config is a speculative decoding configuration, read from the JSON of
// vLLM's --speculative-config.
type Config struct {
	// Method is the proposer; only "ngram" (or vLLM's older "[ngram]").
	Method string `json:"method"`
	// NumTokens is the number of draft tokens a step carries at most per
	// sequence.
	NumTokens int `json:"num_speculative_tokens"`
	// LookupMin and LookupMax bound the length of the n-gram looked up.
	// Either defaults to the other, both to 5 (vLLM's defaults).
	LookupMin int `json:"prompt_lookup_min"`
	LookupMax int `json:"prompt_lookup_max"`
}

// Parse reads a --speculative-config value, fills in the defaults and
// validates it. Unknown fields are an error, so that a misspelt or
// unsupported option is not silently ignored.
func Parse(s string) (Config, error) {
	var c Config
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("speculative config: %w", err)
	}
	if dec.More() {
		return Config{}, errors.New("speculative config: trailing data after the JSON object")
	}
	if err := c.fill(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// fill applies the defaults and validates c.
func (c *Config) fill() error {
	switch c.Method {
	case "ngram", "[ngram]":
		c.Method = "ngram"
	case "":
		return errors.New(`speculative config: "method" is required; the one supported is "ngram"`)
	default:
		return fmt.Errorf(`speculative config: method %q is not supported; the one supported is "ngram" (draft models, EAGLE and MTP need a second model)`, c.Method)
	}
	if c.NumTokens < 1 || c.NumTokens > MaxTokens {
		return fmt.Errorf(`speculative config: "num_speculative_tokens" must be in [1, %d], got %d`, MaxTokens, c.NumTokens)
	}
	switch {
	case c.LookupMin == 0 && c.LookupMax == 0:
		c.LookupMin, c.LookupMax = 5, 5
	case c.LookupMin == 0:
		c.LookupMin = c.LookupMax
	case c.LookupMax == 0:
		c.LookupMax = c.LookupMin
	}
	if c.LookupMin < 1 || c.LookupMax < c.LookupMin {
		return fmt.Errorf(`speculative config: need 1 <= "prompt_lookup_min" (%d) <= "prompt_lookup_max" (%d)`, c.LookupMin, c.LookupMax)
	}
	return nil
}

// String is the configuration as the JSON Parse reads.
func (c Config) String() string {
	b, _ := json.Marshal(c)
	return string(b)
}

// Proposer drafts the tokens that may follow a sequence.
type Proposer interface {
	// Propose appends at most k draft tokens for the sequence tokens
	// (prompt and output so far) to dst and returns it.
	Propose(dst, tokens []int, k int) []int
}

// NGram proposes drafts by prompt lookup. It is safe for concurrent use.
type NGram struct {
	min, max int
}

// NewNGram returns the proposer of a filled configuration (from Parse).
func NewNGram(c Config) (*NGram, error) {
	if err := c.fill(); err != nil {
		return nil, err
	}
	return &NGram{min: c.LookupMin, max: c.LookupMax}, nil
}

// Propose appends to dst at most k draft tokens for the sequence tokens
// (prompt and output so far) and returns it. It finds the longest n-gram,
// min ≤ n ≤ max, that ends tokens and also occurs earlier in it, takes its
// first occurrence, and drafts the tokens that followed there (fewer than
// k where the sequence ends first). Without a match it drafts nothing.
// It takes O(len(tokens) · max) time and allocates only if dst is short.
func (g *NGram) Propose(dst, tokens []int, k int) []int {
	n := len(tokens)
	if k <= 0 || n <= g.min {
		return dst
	}
	best, at := 0, -1 // longest match, and the end (exclusive) of its first occurrence
	for end := g.min; end < n; end++ {
		l := 0
		for l < g.max && l < end && tokens[end-1-l] == tokens[n-1-l] {
			l++
		}
		if l >= g.min && l > best {
			best, at = l, end
			if l == g.max {
				break // no longer match exists; later ones are not first
			}
		}
	}
	if at < 0 {
		return dst
	}
	return append(dst, tokens[at:min(at+k, n)]...)
}
