package structured

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
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

	// The trie, node 0 its root: node i is reached by byte label[i] from
	// its parent; its children are child[i], sibling[child[i]], … in byte
	// order (-1 ends); the tokens it spells are tokHead[i], tokNext[…], ….
	label   []byte
	child   []int32
	sibling []int32
	tokHead []int32
	tokNext []int32 // by token id

	// plain holds the tokens made of whole UTF-8 characters other than
	// '"', '\\' and control characters: inside a string, between
	// characters, each of them is allowed and leaves the state as it was.
	plain []bool
	// other is the rest of the maskable tokens, searched one by one there.
	other []int32
	bytes [][]byte // by token id; nil for tokens never allowed
	// hold are the tokens holding each byte (holding), found on first use.
	hold [256]struct {
		once sync.Once
		ids  []int32
	}
	sub subtrees // built on first use (subtrees)
}

// subtrees describe what lies below each trie node, for searches that
// can take a whole subtree at once: order holds the token ids in
// depth-first order, so node i's subtree's tokens are
// order[first[i]:end[i]]; below[i] has bit b set when byte b < 128 labels
// an edge below node i, and wide[i] when a byte ≥ 128 does.
type subtrees struct {
	once       sync.Once
	order      []int32
	first, end []int32
	below      [][2]uint64
	wide       []bool
}

// subtrees builds v.sub on first use.
func (v *Vocab) subtrees() *subtrees {
	t := &v.sub
	t.once.Do(func() {
		n := len(v.label)
		t.first, t.end, t.below, t.wide = make([]int32, n), make([]int32, n), make([][2]uint64, n), make([]bool, n)
		t.order = make([]int32, 0, v.size)
		// Children have higher indices than their parents (NewVocab adds a
		// node after its parent), so a pass from the last node up meets
		// every child before its parent.
		for i := n - 1; i >= 0; i-- {
			for c := v.child[i]; c >= 0; c = v.sibling[c] {
				if b := v.label[c]; b < 128 {
					t.below[i][b/64] |= 1 << (b % 64)
				} else {
					t.wide[i] = true
				}
				t.below[i][0] |= t.below[c][0]
				t.below[i][1] |= t.below[c][1]
				t.wide[i] = t.wide[i] || t.wide[c]
			}
		}
		type frame struct{ node, next int32 } // next: the child to visit next
		stack := []frame{{0, v.child[0]}}
		t.first[0] = 0
		for id := v.tokHead[0]; id >= 0; id = v.tokNext[id] {
			t.order = append(t.order, id)
		}
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			c := top.next
			if c < 0 {
				t.end[top.node] = int32(len(t.order))
				stack = stack[:len(stack)-1]
				continue
			}
			top.next = v.sibling[c]
			t.first[c] = int32(len(t.order))
			for id := v.tokHead[c]; id >= 0; id = v.tokNext[id] {
				t.order = append(t.order, id)
			}
			stack = append(stack, frame{c, v.child[c]})
		}
	})
	return t
}

// NewVocab arranges a vocabulary: pieces[id] is the text token id adds
// when it follows other tokens ("" for tokens that add nothing), special
// reports the control tokens (never allowed, except eos), and eos are the
// tokens that end a generation (allowed once the format is complete).
func NewVocab(pieces []string, special func(id int) bool, eos []int) *Vocab {
	v := &Vocab{size: len(pieces), eos: slices.Clone(eos), plain: make([]bool, len(pieces)), bytes: make([][]byte, len(pieces)), tokNext: make([]int32, len(pieces))}
	var ids []int32
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
		ids = append(ids, int32(id))
	}
	// Sorted, each piece shares its trie path with the one before up to
	// their common prefix, and a node's children come in byte order.
	slices.SortFunc(ids, func(a, b int32) int { return strings.Compare(pieces[a], pieces[b]) })
	n := 1
	for i, id := range ids {
		n += len(pieces[id])
		if i > 0 {
			n -= commonPrefix(pieces[id], pieces[ids[i-1]])
		}
	}
	v.label = make([]byte, 1, n)
	v.child = append(make([]int32, 0, n), -1)
	v.sibling = append(make([]int32, 0, n), -1)
	v.tokHead = append(make([]int32, 0, n), -1)
	last := append(make([]int32, 0, n), -1) // each node's last child so far
	path := []int32{0}                      // the nodes of the previous piece, root first
	prev := ""
	for _, id := range ids {
		p := pieces[id]
		path = path[:commonPrefix(p, prev)+1]
		for i := len(path) - 1; i < len(p); i++ {
			c, parent := int32(len(v.label)), path[len(path)-1]
			v.label = append(v.label, p[i])
			v.child, v.sibling, v.tokHead, last = append(v.child, -1), append(v.sibling, -1), append(v.tokHead, -1), append(last, -1)
			if last[parent] < 0 {
				v.child[parent] = c
			} else {
				v.sibling[last[parent]] = c
			}
			last[parent] = c
			path = append(path, c)
		}
		node := path[len(path)-1]
		v.tokNext[id], v.tokHead[node] = v.tokHead[node], id
		prev = p
	}
	return v
}

// Pieces is what TokenizerVocab reads of a tokenizer.
type Pieces interface {
	VocabSize() int
	Piece(id int) string // the text token id adds after other tokens
	IsSpecial(id int) bool
}

// TokenizerVocab arranges t's vocabulary, eos the tokens that end a
// generation.
func TokenizerVocab(t Pieces, eos []int) *Vocab {
	pieces := make([]string, t.VocabSize())
	for id := range pieces {
		pieces[id] = t.Piece(id)
	}
	return NewVocab(pieces, t.IsSpecial, eos)
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
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

// Format is a compiled output format, shared by the Matchers of every
// sequence that follows it.
type Format struct {
	root    *node
	raw     bool     // Choice, Regex: plain text, not JSON
	compact bool     // no whitespace between JSON tokens (WithoutWhitespace)
	tag     *tag     // TaggedToolCalls: free text with tagged values of root
	grammar *grammar // Grammar: plain text its root derives
	think   string   // AfterThinking: the end marker of the thinking before the format
}

// state is the recognizer of f's text at its start.
func (f *Format) state() jsonState {
	st := newState(f.root, f.raw)
	if f.tag != nil {
		st = newTaggedState(f.root, f.tag)
	}
	st.compact = f.compact
	return st
}

// Free reports whether f leaves the text free until a tag opens a value
// (TaggedToolCalls), rather than holding it from the first token.
func (f *Format) Free() bool { return f.tag != nil && !f.tag.only }

// WithoutWhitespace is f with no whitespace allowed between JSON tokens
// (vLLM's disable_any_whitespace): the shortest text of each value, and
// no room for a small model to loop on spaces and newlines.
func (f *Format) WithoutWhitespace() *Format {
	c := *f
	c.compact = true
	return &c
}

// Choice is the format of exactly one of options as plain text (vLLM's
// guided_choice). Options must be non-empty strings.
func Choice(options []string) (*Format, error) {
	if len(options) == 0 {
		return nil, fmt.Errorf("choice: no options")
	}
	for i, o := range options {
		if o == "" {
			return nil, fmt.Errorf("choice: option %d is empty", i)
		}
	}
	lits := slices.Clone(options)
	slices.Sort(lits)
	return &Format{root: &node{lits: slices.Compact(lits)}, raw: true}, nil
}

// Regex is the format of plain text that matches pattern whole (vLLM's
// guided_regex): RE2 syntax, see compileRegex for what is refused.
func Regex(pattern string) (*Format, error) {
	r, err := compileRegex(pattern)
	if err != nil {
		return nil, fmt.Errorf("regex: %w", err)
	}
	return &Format{root: &node{pattern: r, maxLen: -1, maxItems: -1}, raw: true}, nil
}

// JSONObject is JSON mode's format (OpenAI's response_format {"type":
// "json_object"}): one JSON object, any keys and values.
func JSONObject() *Format { return &Format{root: anyObject} }

// JSONSchema compiles a JSON Schema (response_format {"type":
// "json_schema"}) into a format: one JSON value that the schema allows,
// within the subset compileSchema describes; other schemas are an error
// that says what is not supported.
func JSONSchema(schema []byte) (*Format, error) {
	n, err := compileSchema(schema)
	if err != nil {
		return nil, err
	}
	return &Format{root: n}, nil
}

// Matcher returns a Matcher that holds one generation to f, then an end
// token.
func (v *Vocab) Matcher(f *Format) *Matcher {
	m := &Matcher{v: v, allowed: make([]bool, v.size)}
	if f.grammar != nil {
		m.gm = newGrammarMatch(f.grammar)
	} else {
		m.st = f.state()
	}
	if f.think != "" {
		m.think = &thinkGate{end: newTag(f.think, "")}
	}
	return m
}

// Matcher holds one sequence's generation to a format: it masks the
// tokens that cannot come next and follows the tokens chosen. It
// implements sample.Constraint. A Matcher is not safe for concurrent use.
type Matcher struct {
	v       *Vocab
	st      jsonState
	gm      *grammarMatch // a Grammar's recognizer, instead of st
	think   *thinkGate    // AfterThinking's gate while it is shut; nil after
	allowed []bool        // scratch for Mask

	// In a string with a pattern, between characters, what a token made
	// of text alone allows depends on the pattern's state only: the
	// masks of those tokens by pattern state, kept after the first
	// search there (a pattern loops in a few states: [a-z]+ in one).
	patternMasks map[patternAt][]bool
}

// patternAt is a pattern's state in one schema node's strings.
type patternAt struct {
	n  *node
	rx int32
}

// Complete reports whether the text so far is a whole value of the format.
func (m *Matcher) Complete() bool {
	if m.think != nil && m.think.thinking() {
		return true // the thinking may end the text, as vLLM leaves it free
	}
	if m.gm != nil {
		return m.gm.st.complete()
	}
	return m.st.complete()
}

// Mask sets to -Inf the logits of the tokens that cannot come next: a
// token is allowed when every byte of it is, an end token only once the
// value is complete. When no token is allowed (the vocabulary cannot
// spell what the format needs next), the end tokens are, so the
// generation stops rather than breaks the format silently.
func (m *Matcher) Mask(logits []float32) {
	allowed := m.allowed
	switch at, ok := m.st.atPattern(); {
	case m.think != nil:
		m.thinkMask()
	case m.gm != nil:
		m.gm.mask(m.v, allowed)
	case m.st.tag != nil && m.st.tmode == tFree && !m.st.tag.only:
		m.freeMask()
	case m.st.inPlainString():
		copy(allowed, m.v.plain)
		for _, id := range m.v.other {
			allowed[id] = m.accepts(m.v.bytes[id])
		}
	case ok && m.patternMasks[at] != nil:
		// The text tokens from the pattern state's mask (in plain text,
		// every token is); the others, which may close the string, one
		// by one.
		copy(allowed, m.patternMasks[at])
		if !m.st.raw {
			for _, id := range m.v.other {
				allowed[id] = m.accepts(m.v.bytes[id])
			}
		}
	default:
		clear(allowed)
		m.search(0, m.st)
		if ok {
			if m.patternMasks == nil {
				m.patternMasks = map[patternAt][]bool{}
			}
			mask := slices.Clone(allowed)
			if !m.st.raw {
				for i, plain := range m.v.plain {
					mask[i] = mask[i] && plain
				}
			}
			m.patternMasks[at] = mask
		}
	}
	stuck := !slices.Contains(allowed, true)
	for _, id := range m.v.eos {
		if id >= 0 && id < len(allowed) {
			allowed[id] = m.Complete() || stuck
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

// freeMask masks free text, outside a tagged value: a token is allowed
// unless it opens a tag and goes on to what the value cannot be.
func (m *Matcher) freeMask() { m.watchMask(m.st.tag, m.st.tpos, m.accepts) }

// watchMask masks free text watched for t's opening (a tag, or the end
// of a model's thinking), k bytes of it matched at the text's end: every
// token is allowed but those that can complete it, which are allowed as
// check says. Only a token holding the opening's first byte can, or,
// after part of it ("<tool"), one whose first byte carries that part on;
// only those are checked.
func (m *Matcher) watchMask(t *tag, k int, check func([]byte) bool) {
	v := m.v
	if k > 0 {
		var carries [256]bool // the bytes that keep some matched part going
		for ; ; k = t.fail[k] {
			carries[t.open[k]] = true
			if k == 0 {
				break
			}
		}
		for id, p := range v.bytes {
			m.allowed[id] = p != nil && (!carries[p[0]] && bytes.IndexByte(p, t.open[0]) < 0 || check(p))
		}
		return
	}
	for id, p := range v.bytes {
		m.allowed[id] = p != nil
	}
	for _, id := range v.holding(t.open[0]) {
		m.allowed[id] = check(v.bytes[id])
	}
}

// holding lists the tokens whose bytes hold b, found once per byte and
// shared by every Matcher.
func (v *Vocab) holding(b byte) []int32 {
	h := &v.hold[b]
	h.once.Do(func() {
		h.ids = []int32{}
		for id, p := range v.bytes {
			if bytes.IndexByte(p, b) >= 0 {
				h.ids = append(h.ids, int32(id))
			}
		}
	})
	return h.ids
}

// search marks the tokens in node's subtree that state st allows.
func (m *Matcher) search(node int32, st jsonState) {
	v := m.v
	for id := v.tokHead[node]; id >= 0; id = v.tokNext[id] {
		m.allowed[id] = true
	}
	for c := v.child[node]; c >= 0; c = v.sibling[c] {
		next := st
		if next.step(v.label[c]) {
			m.search(c, next)
		}
	}
}

// accepts reports whether the state takes every byte of p.
func (m *Matcher) accepts(p []byte) bool {
	if m.gm != nil {
		_, ok := m.gm.run(p)
		return ok
	}
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
	if m.think != nil {
		m.thinkAccept(m.v.bytes[token])
		return
	}
	m.acceptBytes(m.v.bytes[token])
}

// acceptBytes follows p through the format, or leaves the state as it
// was when the format does not take all of it.
func (m *Matcher) acceptBytes(p []byte) {
	if m.gm != nil {
		m.gm.accept(p)
		return
	}
	st := m.st
	for _, b := range p {
		if !st.step(b) {
			return
		}
	}
	m.st = st
}
