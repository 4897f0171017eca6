package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Vocabulary is what prompt construction needs from a tokenizer.
// *tokenizer.Tokenizer implements it.
type Vocabulary interface {
	// Encode returns the token ids of text; addSpecial adds BOS/EOS and the
	// like. Prompts are measured with addSpecial false.
	Encode(text string, addSpecial bool) []int
	// Token returns the vocabulary spelling of id ("▁the", "Ġthe", "the").
	Token(id int) string
	// VocabSize is one more than the largest id.
	VocabSize() int
}

// Word pool limits: enough words that random prompts do not repeat, few
// enough that checking every pair stays cheap (256² short encodes, ~25 ms).
const (
	maxPoolWords = 256
	minPoolWords = 8
	// maxAdjust bounds the re-encodes of a prompt whose length missed.
	maxAdjust = 8
)

// PromptBuilder makes prompt text of an exact token length from a
// deterministic pseudo-random stream of words. It is immutable and safe
// for concurrent use when its Vocabulary is (*tokenizer.Tokenizer is).
//
// The words are lowercase ASCII vocabulary tokens chosen so that each
// encodes to one token at the start of a text and after a space, and no
// two of them merge across the space between them (checked for every pair
// when the builder is made). A prompt of n words joined by single spaces
// therefore encodes to n tokens, and Prompt checks that by encoding it.
type PromptBuilder struct {
	vocab Vocabulary
	words []string
	seed  uint64
}

// NewPromptBuilder picks the word pool from vocab's vocabulary. Different
// seeds give different prompts for the same requests.
func NewPromptBuilder(vocab Vocabulary, seed int64) (*PromptBuilder, error) {
	b := &PromptBuilder{vocab: vocab, seed: uint64(seed)}
	seen := map[string]bool{}
	for id := 0; id < vocab.VocabSize() && len(b.words) < maxPoolWords; id++ {
		w := vocab.Token(id)
		w = strings.TrimPrefix(strings.TrimPrefix(w, "▁"), "Ġ")
		if seen[w] || !isLowerASCII(w) {
			continue
		}
		seen[w] = true
		if b.fits(w) {
			b.words = append(b.words, w)
		}
	}
	if len(b.words) < minPoolWords {
		return nil, fmt.Errorf("prompt builder: the tokenizer has %d whole-word lowercase tokens, need %d", len(b.words), minPoolWords)
	}
	return b, nil
}

func isLowerASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return s != ""
}

// fits reports whether w is one token alone and after a space, and stays
// apart from every word already in the pool on either side.
func (b *PromptBuilder) fits(w string) bool {
	if len(b.vocab.Encode(w, false)) != 1 || len(b.vocab.Encode(w+" "+w, false)) != 2 {
		return false
	}
	for _, p := range b.words {
		if len(b.vocab.Encode(p+" "+w, false)) != 2 || len(b.vocab.Encode(w+" "+p, false)) != 2 {
			return false
		}
	}
	return true
}

// PoolSize returns the number of distinct words prompts are made of.
func (b *PromptBuilder) PoolSize() int { return len(b.words) }

// Prompt returns text that encodes to exactly r.InputTokens ids with
// Encode(text, false); a server adds its own special tokens (BOS, and for
// chat endpoints the chat template) on top. The text is a function of the
// builder's seed and r alone:
//
//   - With HashIDs, block i (words [512i, 512(i+1))) is drawn from a stream
//     seeded by (seed, HashIDs[i]), so equal ids give identical text blocks
//     and requests sharing a hash-id prefix share a token prefix, which is
//     what a server's prefix cache keys on. The last block is the first
//     words of its id's stream, cut to the row's length.
//   - Without, the words come from one stream seeded by (seed, r.Index).
//
// If the encoded length misses (a tokenizer that merges the pool's words
// after all), the tail is lengthened or shortened and the text re-encoded,
// up to a few times; an error says when that fails.
func (b *PromptBuilder) Prompt(r Request) (string, error) {
	if r.InputTokens < 1 {
		return "", errors.New("prompt builder: input length must be positive")
	}
	words := r.InputTokens
	for range maxAdjust {
		text := b.text(r, words)
		n := len(b.vocab.Encode(text, false))
		if n == r.InputTokens {
			return text, nil
		}
		words = max(1, words+r.InputTokens-n)
	}
	return "", fmt.Errorf("prompt builder: request %d: no text of %d tokens after %d tries", r.Index, r.InputTokens, maxAdjust)
}

// text joins n words of r's streams with single spaces.
func (b *PromptBuilder) text(r Request, n int) string {
	var sb strings.Builder
	sb.Grow(n * 6)
	var rng *rand.Rand
	block := -1
	for i := range n {
		switch {
		case len(r.HashIDs) == 0 && rng == nil:
			rng = rand.New(rand.NewPCG(b.seed^0x9e3779b97f4a7c15, uint64(r.Index)))
		case len(r.HashIDs) > 0 && min(i/MooncakeBlockTokens, len(r.HashIDs)-1) != block:
			block = min(i/MooncakeBlockTokens, len(r.HashIDs)-1)
			rng = rand.New(rand.NewPCG(b.seed, uint64(r.HashIDs[block])))
		}
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(b.words[rng.IntN(len(b.words))])
	}
	return sb.String()
}
