package structured

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// regex is a regular expression compiled to a DFA over runes that
// matches whole strings (a JSON Schema pattern or vLLM's guided_regex, as
// xgrammar and outlines read them: the text must match from its start to
// its end). It is built eagerly from the expression's NFA (Go's
// regexp/syntax program) by subset construction, each state's
// transitions a sorted list of rune ranges, and pruned so that every
// state it keeps can still reach a match: a prefix the DFA accepts can
// always be completed.
type regex struct {
	states []dfaState // states[0] is the start
}

type dfaState struct {
	accept bool
	// Transitions: runes lo[i]..hi[i] go to next[i]; ranges sorted and
	// disjoint; runes in no range go nowhere.
	lo, hi []rune
	next   []int32
}

// Limits of the DFA a pattern may compile to.
const (
	maxRegexStates      = 2048
	maxRegexTransitions = 1 << 16
	maxRegexLen         = 1000
)

// compileRegex compiles pattern (Go's RE2 syntax, which JSON Schema's
// ECMA-262 patterns mostly share) into a DFA. Anchors ^ and $ at the ends
// are accepted (the match is whole anyway); word boundaries, line anchors
// in multi-line mode, and patterns whose DFA grows past the limits are
// refused.
func compileRegex(pattern string) (*regex, error) {
	if len(pattern) > maxRegexLen {
		return nil, fmt.Errorf("pattern of %d bytes; at most %d are supported", len(pattern), maxRegexLen)
	}
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	b := &dfaBuilder{prog: prog, index: map[string]int32{}}
	if err := b.checkInsts(); err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	start := b.closure(nil, []uint32{uint32(prog.Start)}, true, false)
	if _, err := b.state(start); err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	for i := 0; i < len(b.sets); i++ {
		if err := b.expand(int32(i)); err != nil {
			return nil, fmt.Errorf("pattern %q: %w", pattern, err)
		}
	}
	r := b.prune()
	if r == nil {
		return nil, fmt.Errorf("pattern %q matches no string", pattern)
	}
	return r, nil
}

// dfaBuilder runs the subset construction.
type dfaBuilder struct {
	prog   *syntax.Prog
	sets   [][]uint32 // each DFA state's NFA instructions (runes and Match), sorted
	index  map[string]int32
	states []dfaState
	trans  int
}

// checkInsts refuses the instructions the DFA cannot follow.
func (b *dfaBuilder) checkInsts() error {
	for _, in := range b.prog.Inst {
		if in.Op == syntax.InstEmptyWidth && syntax.EmptyOp(in.Arg)&^(syntax.EmptyBeginText|syntax.EmptyEndText) != 0 {
			return fmt.Errorf("word boundaries and multi-line anchors are not supported")
		}
	}
	return nil
}

// closure adds to set the instructions reachable from pcs without reading
// a rune: the rune instructions and Match, following alternations,
// captures and no-ops, the begin-text anchor only at the start, and the
// end-text anchor only at the end (elsewhere it stays in the set, for
// accepts to follow).
func (b *dfaBuilder) closure(set []uint32, pcs []uint32, atStart, atEnd bool) []uint32 {
	seen := map[uint32]bool{}
	stack := slices.Clone(pcs)
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pc] {
			continue
		}
		seen[pc] = true
		in := &b.prog.Inst[pc]
		switch in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			stack = append(stack, in.Out, in.Arg)
		case syntax.InstCapture, syntax.InstNop:
			stack = append(stack, in.Out)
		case syntax.InstEmptyWidth:
			switch {
			case syntax.EmptyOp(in.Arg) == syntax.EmptyBeginText && atStart, syntax.EmptyOp(in.Arg) == syntax.EmptyEndText && atEnd:
				stack = append(stack, in.Out)
			case syntax.EmptyOp(in.Arg) == syntax.EmptyEndText:
				set = append(set, pc)
			}
		case syntax.InstFail:
		default: // runes and Match
			set = append(set, pc)
		}
	}
	slices.Sort(set)
	return slices.Compact(set)
}

// accepts reports whether the instructions match at the end of the text:
// Match, or an end anchor that leads to it.
func (b *dfaBuilder) accepts(set []uint32) bool {
	var anchors []uint32
	for _, pc := range set {
		switch in := &b.prog.Inst[pc]; in.Op {
		case syntax.InstMatch:
			return true
		case syntax.InstEmptyWidth:
			anchors = append(anchors, in.Out)
		}
	}
	return len(anchors) > 0 && slices.ContainsFunc(b.closure(nil, anchors, false, true), func(pc uint32) bool { return b.prog.Inst[pc].Op == syntax.InstMatch })
}

// state interns a set of instructions as a DFA state.
func (b *dfaBuilder) state(set []uint32) (int32, error) {
	var key strings.Builder
	for _, pc := range set {
		fmt.Fprintf(&key, "%d,", pc)
	}
	if i, ok := b.index[key.String()]; ok {
		return i, nil
	}
	if len(b.sets) == maxRegexStates {
		return 0, fmt.Errorf("its automaton has more than %d states", maxRegexStates)
	}
	i := int32(len(b.sets))
	b.index[key.String()] = i
	b.sets = append(b.sets, set)
	b.states = append(b.states, dfaState{accept: b.accepts(set)})
	return i, nil
}

// runeRanges are the ranges of runes instruction in reads, as sorted
// pairs, case folding spelled out.
func runeRanges(in *syntax.Inst) []rune {
	switch in.Op {
	case syntax.InstRuneAny:
		return []rune{0, unicode.MaxRune}
	case syntax.InstRuneAnyNotNL:
		return []rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}
	case syntax.InstRune1:
		return []rune{in.Rune[0], in.Rune[0]}
	}
	if len(in.Rune) == 1 { // one rune, perhaps folded
		r := in.Rune[0]
		out := []rune{r, r}
		if syntax.Flags(in.Arg)&syntax.FoldCase != 0 {
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				out = append(out, f, f)
			}
		}
		return out
	}
	return in.Rune
}

// expand computes state i's transitions: the rune space cut at every
// range boundary of its instructions, each piece going to the closure of
// the instructions that read it.
func (b *dfaBuilder) expand(i int32) error {
	set := b.sets[i]
	var cuts []rune
	type rng struct {
		lo, hi rune
		out    uint32
	}
	var ranges []rng
	for _, pc := range set {
		in := &b.prog.Inst[pc]
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			rs := runeRanges(in)
			for j := 0; j+1 < len(rs); j += 2 {
				ranges = append(ranges, rng{rs[j], rs[j+1], in.Out})
				cuts = append(cuts, rs[j], rs[j+1]+1)
			}
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	for c := 0; c+1 < len(cuts); c++ {
		lo, hi := cuts[c], cuts[c+1]-1
		var outs []uint32
		for _, r := range ranges {
			if r.lo <= lo && hi <= r.hi {
				outs = append(outs, r.out)
			}
		}
		if len(outs) == 0 {
			continue
		}
		next, err := b.state(b.closure(nil, outs, false, false))
		if err != nil {
			return err
		}
		st := &b.states[i] // after b.state, which may grow b.states
		if n := len(st.next); n > 0 && st.next[n-1] == next && st.hi[n-1] == lo-1 {
			st.hi[n-1] = hi // a piece that continues the last range to the same state
			continue
		}
		st.lo, st.hi, st.next = append(st.lo, lo), append(st.hi, hi), append(st.next, next)
		if b.trans++; b.trans > maxRegexTransitions {
			return fmt.Errorf("its automaton has more than %d transitions", maxRegexTransitions)
		}
	}
	return nil
}

// prune keeps the states that can reach a match and renumbers them, the
// start first; nil when the start cannot.
func (b *dfaBuilder) prune() *regex {
	live := make([]bool, len(b.states))
	for changed := true; changed; {
		changed = false
		for i, st := range b.states {
			if live[i] {
				continue
			}
			if st.accept || slices.ContainsFunc(st.next, func(n int32) bool { return live[n] }) {
				live[i], changed = true, true
			}
		}
	}
	if !live[0] {
		return nil
	}
	renum := make([]int32, len(b.states))
	var n int32
	for i := range b.states {
		renum[i] = -1
		if live[i] {
			renum[i], n = n, n+1
		}
	}
	r := &regex{}
	for i, st := range b.states {
		if !live[i] {
			continue
		}
		out := dfaState{accept: st.accept}
		for j, next := range st.next {
			if live[next] {
				out.lo, out.hi, out.next = append(out.lo, st.lo[j]), append(out.hi, st.hi[j]), append(out.next, renum[next])
			}
		}
		r.states = append(r.states, out)
	}
	return r
}

// step returns the state after rune c from state s, or -1 when c cannot
// come next.
func (r *regex) step(s int32, c rune) int32 {
	st := &r.states[s]
	i, _ := slices.BinarySearch(st.hi, c) // the first range ending at or after c
	if i < len(st.hi) && st.lo[i] <= c {
		return st.next[i]
	}
	return -1
}

// live reports whether some rune in lo..hi can come next from state s:
// the runes a UTF-8 sequence begun so far may still spell.
func (r *regex) live(s int32, lo, hi rune) bool {
	st := &r.states[s]
	i, _ := slices.BinarySearch(st.hi, lo)
	return i < len(st.hi) && st.lo[i] <= hi
}

// utf8Span is the runes a UTF-8 sequence may spell given its first bytes
// (lead byte first): the sequence's value range with those bits fixed,
// clipped to valid scalar values.
func utf8Span(prefix []byte) (lo, hi rune) {
	n := len(prefix)
	var size int
	var v rune
	switch b := prefix[0]; {
	case b < 0x80:
		return rune(b), rune(b)
	case b < 0xE0:
		size, v = 2, rune(b&0x1F)
	case b < 0xF0:
		size, v = 3, rune(b&0x0F)
	default:
		size, v = 4, rune(b&0x07)
	}
	for _, c := range prefix[1:] {
		v = v<<6 | rune(c&0x3F)
	}
	free := 6 * (size - n)
	lo, hi = v<<free, v<<free|(1<<free-1)
	return max(lo, 0), min(hi, utf8.MaxRune)
}
