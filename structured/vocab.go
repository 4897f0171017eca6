package structured

import (
	"math"
	"slices"
	"unicode/utf8"
)

// Vocab is a model's vocabulary arranged for masking: every token's bytes
// in a trie, so that a search of the tokens a state allows shares their
// common prefixes and drops a whole subtree at the first byte the state
// refuses, and the set of tokens that a string's content can always take.
// It is built once per model and shared, read-only, by every Matcher.
type Vocab struct {
	size int
	eos  []int

	// The trie: node i's children are edges[first[i]:first[i+1]], sorted
	// by byte; the tokens spelled by the path to node i are
	// tokens[tokFirst[i]:tokFirst[i+1]]. Node 0 is the root.
	first    []int32
	edges    []edge
	tokFirst []int32
	tokens   []int32

	// plain holds the tokens made of whole UTF-8 characters other than
	// '"', '\\' and control characters: inside a string, between
	// characters, each of them is allowed and leaves the state as it was.
	plain []bool
	// other is the rest of the maskable tokens, searched one by one there.
	other []int32
	bytes [][]byte // by token id; nil for tokens never allowed
}

type edge struct {
	b     byte
	child int32
}

// NewVocab arranges a vocabulary: pieces[id] is the text token id adds
// when it follows other tokens ("" for tokens that add nothing), special
// reports the control tokens (never allowed, except eos), and eos are the
// tokens that end a generation (allowed once the format is complete).
func NewVocab(pieces []string, special func(id int) bool, eos []int) *Vocab {
	v := &Vocab{size: len(pieces), eos: slices.Clone(eos), plain: make([]bool, len(pieces)), bytes: make([][]byte, len(pieces))}
	type buildNode struct {
		kids map[byte]int32
		toks []int32
	}
	nodes := []buildNode{{}}
	for id, p := range pieces {
		if p == "" || special(id) {
			continue
		}
		v.bytes[id] = []byte(p)
		if plainString(p) {
			v.plain[id] = true
		} else {
			v.other = append(v.other, int32(id))
		}
		n := int32(0)
		for i := 0; i < len(p); i++ {
			if nodes[n].kids == nil {
				nodes[n].kids = map[byte]int32{}
			}
			c, ok := nodes[n].kids[p[i]]
			if !ok {
				c = int32(len(nodes))
				nodes[n].kids[p[i]] = c
				nodes = append(nodes, buildNode{})
			}
			n = c
		}
		nodes[n].toks = append(nodes[n].toks, int32(id))
	}
	v.first = make([]int32, len(nodes)+1)
	v.tokFirst = make([]int32, len(nodes)+1)
	for i, n := range nodes {
		start := len(v.edges)
		for b, c := range n.kids {
			v.edges = append(v.edges, edge{b, c})
		}
		slices.SortFunc(v.edges[start:], func(x, y edge) int { return int(x.b) - int(y.b) })
		v.first[i+1] = int32(len(v.edges))
		v.tokens = append(v.tokens, n.toks...)
		v.tokFirst[i+1] = int32(len(v.tokens))
	}
	return v
}

// plainString reports whether every byte of p may stand inside a JSON
// string with nothing around it: whole UTF-8 characters, none of them '"',
// '\\' or a control character.
func plainString(p string) bool {
	if !utf8.ValidString(p) {
		return false
	}
	for i := 0; i < len(p); i++ {
		if b := p[i]; b < 0x20 || b == '"' || b == '\\' {
			return false
		}
	}
	return true
}

// JSONObject returns a Matcher that holds a generation to one JSON object
// (OpenAI's response_format {"type": "json_object"}), then an end token.
func (v *Vocab) JSONObject() *Matcher {
	return &Matcher{v: v, allowed: make([]bool, v.size)}
}

// Matcher holds one sequence's generation to a format: it masks the
// tokens that cannot come next and follows the tokens chosen. It
// implements sample.Constraint. A Matcher is not safe for concurrent use.
type Matcher struct {
	v       *Vocab
	st      jsonState
	allowed []bool // scratch for Mask
}

// Complete reports whether the text so far is a whole object.
func (m *Matcher) Complete() bool { return m.st.complete() }

// Mask sets to -Inf the logits of the tokens that cannot come next: a
// token is allowed when every byte of it is, an end token only once the
// object is complete. When no token is allowed (the vocabulary cannot
// spell what the format needs next), the end tokens are, so the
// generation stops rather than breaks the format silently.
func (m *Matcher) Mask(logits []float32) {
	allowed := m.allowed
	if m.st.inPlainString() {
		copy(allowed, m.v.plain)
		for _, id := range m.v.other {
			allowed[id] = m.accepts(m.v.bytes[id])
		}
	} else {
		clear(allowed)
		m.search(0, m.st)
	}
	any := false
	for _, ok := range allowed {
		if ok {
			any = true
			break
		}
	}
	for _, id := range m.v.eos {
		if id >= 0 && id < len(allowed) {
			allowed[id] = m.st.complete() || !any
		}
	}
	n := min(len(logits), len(allowed))
	for id, ok := range allowed[:n] {
		if !ok {
			logits[id] = float32(math.Inf(-1))
		}
	}
	for id := n; id < len(logits); id++ { // the model's ids past the tokenizer's (padding)
		logits[id] = float32(math.Inf(-1))
	}
}

// search marks the tokens in node's subtree that state st allows.
func (m *Matcher) search(node int32, st jsonState) {
	v := m.v
	for _, id := range v.tokens[v.tokFirst[node]:v.tokFirst[node+1]] {
		m.allowed[id] = true
	}
	for _, e := range v.edges[v.first[node]:v.first[node+1]] {
		next := st
		if next.step(e.b) {
			m.search(e.child, next)
		}
	}
}

// accepts reports whether the state takes every byte of p.
func (m *Matcher) accepts(p []byte) bool {
	st := m.st
	for _, b := range p {
		if !st.step(b) {
			return false
		}
	}
	return true
}

// Accept follows token, the one chosen. A token the format does not allow
// (one Mask left open because nothing was, or an end token) leaves the
// state as it was.
func (m *Matcher) Accept(token int) {
	if token < 0 || token >= len(m.v.bytes) {
		return
	}
	st := m.st
	for _, b := range m.v.bytes[token] {
		if !st.step(b) {
			return
		}
	}
	m.st = st
}
