// Package specdecode proposes draft tokens for speculative decoding: a
// decode step runs a sequence's last token and k drafts at once, and the
// engine keeps the drafts the model would have chosen itself, plus the
// model's own token at the first one it would not. The output is the same
// as without drafts; only the number of steps changes.
//
// Two methods, as vLLM names them: "ngram" (prompt lookup decoding), whose
// draft is what followed an earlier occurrence of the sequence's last few
// tokens (NGram here; it costs no model and pays off where outputs copy
// their context: code edits, extraction, summaries, structured output),
// and "draft_model", whose draft is a smaller model's greedy
// continuation (run by the engine, which owns the draft model's runner
// and KV cache; this package parses its configuration).
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
	// Method is the proposer: "ngram" (or vLLM's older "[ngram]") or
	// "draft_model"; a configuration with a Model and no method is
	// "draft_model", as older vLLM read it.
	Method string `json:"method"`
	// NumTokens is the number of draft tokens a step carries at most per
	// sequence.
	NumTokens int `json:"num_speculative_tokens"`
	// LookupMin and LookupMax bound the length of the n-gram looked up
	// (ngram only). Either defaults to the other, both to 5 (vLLM's
	// defaults).
	LookupMin int `json:"prompt_lookup_min,omitempty"`
	LookupMax int `json:"prompt_lookup_max,omitempty"`
	// Model is the draft model's Hugging Face directory (draft_model
	// only). It must have the target's vocabulary size, as vLLM requires.
	Model string `json:"model,omitempty"`
	// DraftTP is vLLM's draft_tensor_parallel_size: the draft model runs
	// on one rank, so only 1 (the default) is taken.
	DraftTP int `json:"draft_tensor_parallel_size,omitempty"`
}

// Methods.
const (
	NGramMethod = "ngram"
	DraftModel  = "draft_model"
)

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
	case NGramMethod, "[ngram]":
		c.Method = NGramMethod
	case DraftModel:
	case "":
		if c.Model == "" {
			return errors.New(`speculative config: "method" is required: "ngram", or "draft_model" with a "model"`)
		}
		c.Method = DraftModel
	default:
		return fmt.Errorf(`speculative config: method %q is not supported; the supported ones are "ngram" and "draft_model" (EAGLE, Medusa and MTP heads are not)`, c.Method)
	}
	if c.NumTokens < 1 || c.NumTokens > MaxTokens {
		return fmt.Errorf(`speculative config: "num_speculative_tokens" must be in [1, %d], got %d`, MaxTokens, c.NumTokens)
	}
	if c.Method == DraftModel {
		switch {
		case c.Model == "":
			return errors.New(`speculative config: method "draft_model" needs the draft model's directory in "model"`)
		case c.LookupMin != 0 || c.LookupMax != 0:
			return errors.New(`speculative config: "prompt_lookup_min" and "prompt_lookup_max" are options of method "ngram", not "draft_model"`)
		case c.DraftTP == 0:
			c.DraftTP = 1
		case c.DraftTP != 1:
			return fmt.Errorf(`speculative config: "draft_tensor_parallel_size" %d: the draft model runs on one rank; only 1 is supported`, c.DraftTP)
		}
		return nil
	}
	if c.Model != "" || c.DraftTP != 0 {
		return errors.New(`speculative config: "model" and "draft_tensor_parallel_size" are options of method "draft_model", not "ngram"`)
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
