package sample

import (
	"fmt"
	"slices"
)

// logitBias adds Params.LogitBias to the logits and takes it back off, as
// penalties does, so that Sample reports raw log-probabilities.
type logitBias struct {
	entries []biasEntry // by token id
	saved   []float32   // the logits apply replaced
}

type biasEntry struct {
	tok  int
	bias float32
}

// newLogitBias checks m's token ids against the vocabulary and sorts them.
func newLogitBias(m map[int]float32, vocab int) (logitBias, error) {
	var b logitBias
	for tok, v := range m {
		if tok < 0 || tok >= vocab {
			return b, fmt.Errorf("%w: token id %d is outside the vocabulary [0, %d)", ErrLogitBias, tok, vocab)
		}
		if v != 0 {
			b.entries = append(b.entries, biasEntry{tok, v})
		}
	}
	slices.SortFunc(b.entries, func(x, y biasEntry) int { return x.tok - y.tok })
	b.saved = make([]float32, len(b.entries))
	return b, nil
}

// apply adds each bias to its token's logit.
func (b *logitBias) apply(logits []float32) {
	for i, e := range b.entries {
		b.saved[i] = logits[e.tok]
		logits[e.tok] += e.bias
	}
}

// restore undoes the last apply.
func (b *logitBias) restore(logits []float32) {
	for i, e := range b.entries {
		logits[e.tok] = b.saved[i]
	}
}
