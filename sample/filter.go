package sample

import (
	"errors"
	"fmt"
	"slices"
)

// ErrAllowedTokenIDs and ErrBadWords mark invalid filters, so an API layer
// can name the field.
var (
	ErrAllowedTokenIDs = errors.New("allowed_token_ids")
	ErrBadWords        = errors.New("bad_words")
)

// filter holds the token filters vLLM applies before the penalties:
// allowed_token_ids and bad_words.
type filter struct {
	allowed []uint64 // bitset over the vocabulary; nil: every token is allowed
	bad     [][]int  // token sequences whose last token may not complete them
	recent  []int    // the latest generated tokens, as many as the longest bad prefix needs
	keep    int      // that many: the longest bad sequence's length − 1
}

// newFilter checks the filters' token ids against the vocabulary.
func newFilter(allowed []int, bad [][]int, vocab int) (filter, error) {
	f := filter{}
	if allowed != nil {
		if len(allowed) == 0 {
			return f, fmt.Errorf("%w is empty: no token could be generated", ErrAllowedTokenIDs)
		}
		f.allowed = make([]uint64, (vocab+63)/64)
		for _, id := range allowed {
			if id < 0 || id >= vocab {
				return f, fmt.Errorf("%w: token id %d is outside the vocabulary [0, %d)", ErrAllowedTokenIDs, id, vocab)
			}
			f.allowed[id/64] |= 1 << (id % 64)
		}
	}
	for _, seq := range bad {
		if len(seq) == 0 {
			return f, fmt.Errorf("%w: a bad word has no tokens", ErrBadWords)
		}
		for _, id := range seq {
			if id < 0 || id >= vocab {
				return f, fmt.Errorf("%w: token id %d is outside the vocabulary [0, %d)", ErrBadWords, id, vocab)
			}
		}
		f.bad = append(f.bad, append([]int(nil), seq...))
		f.keep = max(f.keep, len(seq)-1)
	}
	return f, nil
}

// on reports whether any filter is set.
func (f *filter) on() bool { return f.allowed != nil || len(f.bad) > 0 }

// apply sets to -Inf the logits of tokens outside the allowed set and of
// each bad word's last token where the generated tokens end with the rest
// of it (a one-token bad word is always banned), as vLLM does. The chosen
// token is never one of them unless every logit is -Inf, so the raw
// logits need no restoring.
func (f *filter) apply(logits []float32) {
	if f.allowed != nil {
		for i := range logits {
			if f.allowed[i/64]&(1<<(i%64)) == 0 {
				logits[i] = negInf
			}
		}
	}
	for _, seq := range f.bad {
		prefix := seq[:len(seq)-1]
		if n := len(f.recent); n >= len(prefix) && slices.Equal(f.recent[n-len(prefix):], prefix) {
			logits[seq[len(seq)-1]] = negInf
		}
	}
}

// record follows a generated token.
func (f *filter) record(tok int) {
	if f.keep == 0 {
		return
	}
	f.recent = append(f.recent, tok)
	if len(f.recent) > 2*f.keep {
		f.recent = append(f.recent[:0], f.recent[len(f.recent)-f.keep:]...)
	}
}
