package specdecode

import "fmt"

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
	if c.Method != NGramMethod {
		return nil, fmt.Errorf("specdecode: method %q has no n-gram proposer", c.Method)
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
