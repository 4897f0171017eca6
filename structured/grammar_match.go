package structured

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The grammar recognizer is a pushdown automaton over characters, as in
// llama.cpp: a state is the set of parse stacks that the text so far
// leaves, each stack's top a character element still to match and below
// it the positions to go on at once the rules above end. A character
// keeps the stacks whose top takes it, each advanced past it and expanded
// (a rule reference at the top becomes each of its alternatives; an
// alternative's end pops). The text is complete when some stack is empty.
//
// Stacks are persistent lists of interned frames, so equal stacks are
// one pointer, and state sets are interned by their frames, each with the
// states its characters lead to memoized and its token mask cached: the
// trie search of a mask steps a set by a map lookup after the first time.

// gframe is one stack entry: an element position and the stack below.
type gframe struct {
	pos  int32
	next *gframe
	id   int64
}

type gframeKey struct {
	pos  int32
	next *gframe
}

// gset is an interned set of stacks: one recognizer state between
// characters.
type gset struct {
	tops   []*gframe // stacks whose top is a character element, by id, distinct
	done   bool      // the empty stack: the text so far is complete
	ascii  [128]*gset
	next   map[rune]*gset // the other characters'
	mask   []uint64       // the token mask from this set over maskOf, once searched
	maskOf *Vocab
	loops  [2]uint64 // bit b: byte b < 128 leads back to this set (loopsOf)
	looped bool      // loops is known
	// Where every top takes all characters past ASCII or none (a
	// string's body does), they all lead to one state: wideNext, once
	// one of them has been stepped (wideUniform).
	wide     int8 // 0 unknown, 1 uniform, -1 not
	wideNext *gset
}

// deadSet marks a memoized step to no state.
var deadSet = &gset{}

// grammarTables are a grammar's interned frames and sets, shared by every
// Matcher of the grammar (the requests that send the same grammar share
// their masks) under mu.
type grammarTables struct {
	mu     sync.Mutex
	frames map[gframeKey]*gframe
	sets   map[string]*gset
	ids    int64 // frames made so far: ids never repeat, across resets
	masks  int   // cached masks
	start  *gset
	// scratch for a step
	out  []*gframe
	seen map[gframeKey]bool
}

// Bounds on a grammar's tables: cached masks (a bit per token each: 2 MiB
// for 128 at Llama 3's vocabulary), and
// sets before the tables start over (a grammar nesting without bound
// makes new stacks as long as the text goes on).
const (
	maxGrammarMasks = 128
	maxGrammarSets  = 1 << 16
)

// grammarState is a gset and the bytes of a character begun but not
// finished. A nil set is a dead state.
type grammarState struct {
	set *gset
	dec utf8Dec
}

// grammarMatch is one sequence's state in a grammar.
type grammarMatch struct {
	g  *grammar
	st grammarState
}

func newGrammarMatch(g *grammar) *grammarMatch {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frames == nil {
		g.reset()
	}
	return &grammarMatch{g: g, st: grammarState{set: g.start}}
}

// reset empties the tables and interns the start state. Sets made before
// stay valid for the Matchers that hold them.
func (g *grammar) reset() {
	g.frames, g.sets, g.seen, g.masks = map[gframeKey]*gframe{}, map[string]*gset{}, map[gframeKey]bool{}, 0
	g.out = g.out[:0]
	done := false
	for _, pos := range g.alts[g.root] {
		done = g.walk(pos, nil) || done
	}
	g.start = g.set(done)
}

// intern returns the one frame of pos over next.
func (g *grammar) intern(pos int32, next *gframe) *gframe {
	k := gframeKey{pos, next}
	if f, ok := g.frames[k]; ok {
		return f
	}
	g.ids++
	f := &gframe{pos: pos, next: next, id: g.ids}
	g.frames[k] = f
	return f
}

// walk adds to g.out the stacks that the alternative from pos, over
// rest, reaches before its first character; it reports whether it
// reaches the empty stack.
func (g *grammar) walk(pos int32, rest *gframe) bool {
	k := gframeKey{pos, rest}
	if g.seen[k] {
		return false
	}
	g.seen[k] = true
	switch e := &g.elems[pos]; e.kind {
	case gEnd:
		if rest == nil {
			return true
		}
		return g.walk(rest.pos, rest.next)
	case gChars:
		g.out = append(g.out, g.intern(pos, rest))
		return false
	default:
		// The continuation after the rule; none when the alternative
		// ends there (a tail call: right recursion keeps the stack flat).
		cont := rest
		if g.elems[pos+1].kind != gEnd {
			cont = g.intern(pos+1, rest)
		}
		done := false
		for _, a := range g.alts[e.rule] {
			done = g.walk(a, cont) || done
		}
		return done
	}
}

// set interns g.out (and done) as a state; nil when it is dead.
func (g *grammar) set(done bool) *gset {
	tops := g.out
	slices.SortFunc(tops, func(a, b *gframe) int { return cmp.Compare(a.id, b.id) })
	tops = slices.Compact(tops)
	if len(tops) == 0 && !done {
		return nil
	}
	var key strings.Builder
	if done {
		key.WriteByte('$')
	}
	for _, f := range tops {
		key.WriteString(strconv.FormatInt(f.id, 36))
		key.WriteByte(',')
	}
	if s, ok := g.sets[key.String()]; ok {
		return s
	}
	s := &gset{tops: slices.Clone(tops), done: done, next: map[rune]*gset{}}
	g.sets[key.String()] = s
	return s
}

// step is the state after character c from s; nil when c cannot come.
func (g *grammar) step(s *gset, c rune) *gset {
	var n *gset
	switch {
	case c < 128:
		n = s.ascii[c]
	case g.wideUniform(s):
		n = s.wideNext
	default:
		n = s.next[c]
	}
	switch n {
	case deadSet:
		return nil
	case nil:
		n = g.stepNew(s, c)
	}
	return n
}

// wideUniform reports whether every top of s takes all characters past
// ASCII or none, so that they all step s alike.
func (g *grammar) wideUniform(s *gset) bool {
	if s.wide == 0 {
		s.wide = 1
		for _, f := range s.tops {
			if e := &g.elems[f.pos]; e.overlaps(0x80, maxRune) && !e.takesAll(0x80, maxRune) {
				s.wide = -1
				break
			}
		}
	}
	return s.wide > 0
}

// maxRune is the largest character a grammar steps through.
const maxRune = 0x10FFFF

// stepNew computes and memoizes step(s, c).
func (g *grammar) stepNew(s *gset, c rune) *gset {
	if len(g.sets) >= maxGrammarSets {
		g.reset()
	}
	g.out = g.out[:0]
	clear(g.seen)
	done := false
	for _, f := range s.tops {
		if g.elems[f.pos].matches(c) {
			done = g.walk(f.pos+1, f.next) || done
		}
	}
	n := g.set(done)
	memo := n
	if n == nil {
		memo = deadSet
	}
	switch {
	case c < 128:
		s.ascii[c] = memo
	case g.wideUniform(s):
		s.wideNext = memo
	default:
		s.next[c] = memo
	}
	return n
}

// live reports whether some character in lo..hi can come next from s.
func (g *grammar) live(s *gset, lo, hi rune) bool {
	for _, f := range s.tops {
		if g.elems[f.pos].overlaps(lo, hi) {
			return true
		}
	}
	return false
}

// feed is the state after byte b from st; ok false when b cannot come.
func (g *grammar) feed(st grammarState, b byte) (grammarState, bool) {
	if !st.dec.feed(b) {
		return st, false
	}
	if st.dec.cont > 0 {
		lo, hi := st.dec.span()
		return st, g.live(st.set, lo, hi)
	}
	st.set = g.step(st.set, st.dec.cp)
	st.dec = utf8Dec{}
	return st, st.set != nil
}

func (st grammarState) complete() bool { return st.dec.cont == 0 && st.set.done }

// mask marks in allowed the tokens of v the current state takes, from the
// cache when it has one.
func (m *grammarMatch) mask(v *Vocab, allowed []bool) {
	g, st := m.g, m.st
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := st.set; st.dec.cont == 0 && s.maskOf == v {
		for w, bits := range s.mask {
			chunk := allowed[w*64 : min(w*64+64, len(allowed))]
			if bits == 0 {
				clear(chunk)
				continue
			}
			for j := range chunk {
				chunk[j] = bits&(1<<j) != 0
			}
		}
		return
	}
	clear(allowed)
	g.search(v, allowed, 0, st)
	if s := st.set; st.dec.cont == 0 && g.masks < maxGrammarMasks {
		if s.maskOf == nil {
			g.masks++
		}
		s.mask, s.maskOf = make([]uint64, (len(allowed)+63)/64), v
		for id, ok := range allowed {
			if ok {
				s.mask[id/64] |= 1 << (id % 64)
			}
		}
	}
}

// loopsOf is the set of ASCII bytes that lead from s back to s, the
// characters a repetition such as a string's body takes without end.
func (g *grammar) loopsOf(s *gset) [2]uint64 {
	if !s.looped {
		for b := range rune(128) {
			if g.step(s, b) == s {
				s.loops[b/64] |= 1 << (b % 64)
			}
		}
		s.looped = true
	}
	return s.loops
}

// search marks the tokens below node that st takes. A subtree whose
// bytes are all ASCII ones that lead from st's set back to it is taken
// whole, without stepping through it: inside a string that is most of
// the vocabulary.
func (g *grammar) search(v *Vocab, allowed []bool, node int32, st grammarState) {
	if st.dec.cont == 0 {
		sub := v.subtrees()
		loops := g.loopsOf(st.set)
		if below := sub.below[node]; !sub.wide[node] && below[0]&^loops[0] == 0 && below[1]&^loops[1] == 0 {
			for _, id := range sub.order[sub.first[node]:sub.end[node]] {
				allowed[id] = true
			}
			return
		}
	}
	for id := v.tokHead[node]; id >= 0; id = v.tokNext[id] {
		allowed[id] = true
	}
	for c := v.child[node]; c >= 0; c = v.sibling[c] {
		if next, ok := g.feed(st, v.label[c]); ok {
			g.search(v, allowed, c, next)
		}
	}
}

// run is the state after p's bytes from the current one; false when one
// cannot come.
func (m *grammarMatch) run(p []byte) (grammarState, bool) {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	st := m.st
	for _, b := range p {
		var ok bool
		if st, ok = m.g.feed(st, b); !ok {
			return st, false
		}
	}
	return st, true
}

// accept follows p's bytes; the state is unchanged when one cannot come.
func (m *grammarMatch) accept(p []byte) {
	if st, ok := m.run(p); ok {
		m.st = st
	}
}

// utf8Dec reads UTF-8 a byte at a time: no overlong forms, surrogates or
// characters above U+10FFFF.
type utf8Dec struct {
	cont   uint8 // continuation bytes still to come
	lo, hi byte  // the range the next one must fall in
	cp     rune  // the character's bits so far
}

// feed reads byte b; false for a byte no character has there. Once
// cont is 0 again the character is cp.
func (d *utf8Dec) feed(b byte) bool {
	if d.cont > 0 {
		if b < d.lo || b > d.hi {
			return false
		}
		d.cont--
		d.lo, d.hi = 0x80, 0xBF
		d.cp = d.cp<<6 | rune(b&0x3F)
		return true
	}
	switch {
	case b < 0x80:
		d.cp = rune(b)
		return true
	case 0xC2 <= b && b <= 0xDF:
		d.cont, d.lo, d.hi = 1, 0x80, 0xBF
	case b == 0xE0:
		d.cont, d.lo, d.hi = 2, 0xA0, 0xBF
	case b == 0xED:
		d.cont, d.lo, d.hi = 2, 0x80, 0x9F
	case 0xE1 <= b && b <= 0xEF:
		d.cont, d.lo, d.hi = 2, 0x80, 0xBF
	case b == 0xF0:
		d.cont, d.lo, d.hi = 3, 0x90, 0xBF
	case 0xF1 <= b && b <= 0xF3:
		d.cont, d.lo, d.hi = 3, 0x80, 0xBF
	case b == 0xF4:
		d.cont, d.lo, d.hi = 3, 0x80, 0x8F
	default:
		return false
	}
	d.cp = rune(b & [4]byte{0, 0x1F, 0x0F, 0x07}[d.cont])
	return true
}

// span is the characters a sequence begun (cont > 0) may still spell,
// given the range its next byte must fall in.
func (d *utf8Dec) span() (lo, hi rune) {
	free := 6 * int(d.cont-1)
	lo = (d.cp<<6 | rune(d.lo&0x3F)) << free
	hi = (d.cp<<6|rune(d.hi&0x3F))<<free | (1<<free - 1)
	return lo, hi
}
