package structured

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// A grammar is a context-free grammar in GBNF, the notation of
// llama.cpp's grammars and of vLLM's guided_grammar (xgrammar's EBNF):
//
//	root   ::= answer ws ("," ws answer)*   # the start rule is root
//	answer ::= "yes" | "no" | [0-9]+ | [^,\n]{1,8} | .
//	ws     ::= [ \t\n]*
//
// Rules are name ::= alternatives, one rule a line (a line that starts
// with | goes on with the rule before, and so does every line inside
// parentheses); alternatives are separated by |, each a sequence of
// string literals, character classes ([a-z], [^"\\], with \n \t \r \\
// \" \] \- \xHH \uHHHH \UHHHHHHHH escapes), . (any character), rule
// names and parenthesised groups, each optionally repeated by *, +, ?,
// {m}, {m,}, {,n} or {m,n}; # starts a comment. Left-recursive rules
// are refused (rewrite a ::= a "x" | "y" as a ::= "y" "x"*).
//
// It is compiled to flat elements: each alternative of each rule is a run
// of character-class and rule-reference elements ended by an end
// element. Repetitions become generated rules: x* is r ::= x r | (empty).
type grammar struct {
	elems []gElem
	alts  [][]int32 // per rule, the first element of each alternative
	names []string  // per rule; generated rules are named after theirs
	root  int32
	grammarTables
}

type gKind uint8

const (
	gEnd   gKind = iota // the alternative is complete
	gChars              // one character of ranges (or, negated, of none of them)
	gRef                // a rule
)

type gElem struct {
	kind   gKind
	neg    bool
	rule   int32
	ranges []rune // lo, hi pairs, sorted and merged
}

// matches reports whether character c is one the element takes.
func (e *gElem) matches(c rune) bool {
	return e.overlaps(c, c)
}

// takesAll reports whether every character in lo..hi is one the element
// takes.
func (e *gElem) takesAll(lo, hi rune) bool {
	for i := 0; i < len(e.ranges); i += 2 {
		if e.neg && e.ranges[i] <= hi && lo <= e.ranges[i+1] {
			return false // a range the element refuses meets lo..hi
		}
		if !e.neg && e.ranges[i] <= lo && hi <= e.ranges[i+1] {
			return true // ranges are merged: one holds all of lo..hi or none does
		}
	}
	return e.neg
}

// overlaps reports whether some character in lo..hi is one the element
// takes.
func (e *gElem) overlaps(lo, hi rune) bool {
	if !e.neg {
		for i := 0; i < len(e.ranges); i += 2 {
			if e.ranges[i] <= hi && lo <= e.ranges[i+1] {
				return true
			}
		}
		return false
	}
	// Some character of lo..hi lies outside every range: walk the gaps.
	next := lo
	for i := 0; i < len(e.ranges) && next <= hi; i += 2 {
		if e.ranges[i] > next {
			return true
		}
		next = max(next, e.ranges[i+1]+1)
	}
	return next <= hi
}

// maxRepeat bounds {m,n}: each repetition copies its element; and
// maxGrammarCopies bounds the copies of a whole grammar.
const (
	maxRepeat        = 1000
	maxGrammarCopies = 1 << 16
)

// Grammar compiles a GBNF grammar (vLLM's guided_grammar) into a format:
// plain text that the rule root derives, whole. The last grammarCacheSize
// grammars compiled are kept by their source: the formats of requests
// that send the same grammar share its recognizer's states and masks.
func Grammar(src string) (*Format, error) {
	c := &grammarCache
	c.Lock()
	g, ok := c.bySource[src]
	c.Unlock()
	if !ok {
		var err error
		if g, err = parseGrammar(src); err != nil {
			return nil, fmt.Errorf("grammar: %w", err)
		}
		c.Lock()
		if c.bySource == nil {
			c.bySource = map[string]*grammar{}
		}
		if _, ok := c.bySource[src]; !ok {
			c.bySource[src], c.order = g, append(c.order, src)
			if len(c.order) > grammarCacheSize {
				delete(c.bySource, c.order[0])
				c.order = c.order[1:]
			}
		}
		g = c.bySource[src]
		c.Unlock()
	}
	return &Format{grammar: g, raw: true}, nil
}

// grammarCache holds the grammars compiled lately, by source, the oldest
// first in order.
var grammarCache struct {
	sync.Mutex
	bySource map[string]*grammar
	order    []string
}

const grammarCacheSize = 32

// gItem is one element of a parsed sequence: a character class or a rule.
type gItem struct {
	chars *gElem
	rule  int32
}

type grammarParser struct {
	src   string
	pos   int
	ids   map[string]int32
	rules [][][]gItem // per rule, its alternatives; nil until defined
	names []string
	line  int
	// copies counts the elements repetitions copy: {m,n} of a group of
	// {m,n} multiplies them.
	copies int
}

func parseGrammar(src string) (*grammar, error) {
	p := &grammarParser{src: src, ids: map[string]int32{}, line: 1}
	for {
		p.space(true)
		if p.pos == len(p.src) {
			break
		}
		if err := p.rule(); err != nil {
			return nil, fmt.Errorf("line %d: %w", p.line, err)
		}
	}
	root, ok := p.ids["root"]
	if !ok || p.rules[root] == nil {
		return nil, fmt.Errorf("no rule named root (the start rule)")
	}
	for i, alts := range p.rules {
		if alts == nil {
			return nil, fmt.Errorf("rule %s is used but not defined", p.names[i])
		}
	}
	g := &grammar{names: p.names, root: root}
	for _, alts := range p.rules {
		var starts []int32
		for _, seq := range alts {
			starts = append(starts, int32(len(g.elems)))
			for _, it := range seq {
				if it.chars != nil {
					g.elems = append(g.elems, *it.chars)
				} else {
					g.elems = append(g.elems, gElem{kind: gRef, rule: it.rule})
				}
			}
			g.elems = append(g.elems, gElem{kind: gEnd})
		}
		g.alts = append(g.alts, starts)
	}
	if err := g.checkLeftRecursion(); err != nil {
		return nil, err
	}
	return g, nil
}

// rule parses name ::= alternatives and the line's end.
func (p *grammarParser) rule() error {
	name := p.name()
	if name == "" {
		return fmt.Errorf("expected a rule name at %q", p.rest())
	}
	p.space(false)
	if !strings.HasPrefix(p.src[p.pos:], "::=") {
		return fmt.Errorf("expected ::= after %s at %q (GBNF rules are name ::= alternatives)", name, p.rest())
	}
	p.pos += 3
	p.space(true)
	id := p.id(name)
	if p.rules[id] != nil {
		return fmt.Errorf("rule %s is defined twice", name)
	}
	alts, err := p.alternatives(false)
	if err != nil {
		return fmt.Errorf("rule %s: %w", name, err)
	}
	p.rules[id] = alts
	if p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
		return fmt.Errorf("rule %s: unexpected %q", name, p.rest())
	}
	return nil
}

// alternatives parses sequences separated by |; nested ones (in
// parentheses) may span lines.
func (p *grammarParser) alternatives(nested bool) ([][]gItem, error) {
	var alts [][]gItem
	for {
		seq, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		if !nested {
			// A line that starts with | goes on with this rule.
			save, line := p.pos, p.line
			p.space(true)
			if p.pos < len(p.src) && p.src[p.pos] == '|' {
				p.pos++
				p.space(true)
				continue
			}
			p.pos, p.line = save, line
		}
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			p.space(true)
			continue
		}
		return alts, nil
	}
}

// sequence parses elements up to a |, a ), or (unless nested) the line's
// end.
func (p *grammarParser) sequence(nested bool) ([]gItem, error) {
	var seq []gItem
	unit := -1 // where the last element starts in seq: what a repetition repeats
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		start := len(seq)
		switch {
		case c == '"':
			s, err := p.literal()
			if err != nil {
				return nil, err
			}
			for _, r := range s {
				seq = append(seq, gItem{chars: &gElem{kind: gChars, ranges: []rune{r, r}}})
			}
			if s == "" {
				seq = append(seq, gItem{rule: p.empty()})
			}
		case c == '[':
			e, err := p.class()
			if err != nil {
				return nil, err
			}
			seq = append(seq, gItem{chars: e})
		case c == '.':
			p.pos++
			seq = append(seq, gItem{chars: &gElem{kind: gChars, ranges: []rune{0, utf8.MaxRune}}})
		case c == '(':
			p.pos++
			p.space(true)
			alts, err := p.alternatives(true)
			if err != nil {
				return nil, err
			}
			if p.pos >= len(p.src) || p.src[p.pos] != ')' {
				return nil, fmt.Errorf("expected ) at %q", p.rest())
			}
			p.pos++
			seq = append(seq, gItem{rule: p.generated("group", alts)})
		case isNameByte(c):
			seq = append(seq, gItem{rule: p.id(p.name())})
		case c == '*' || c == '+' || c == '?' || c == '{':
			if unit < 0 {
				return nil, fmt.Errorf("%q repeats nothing at %q", c, p.rest())
			}
			lo, hi, err := p.repetition()
			if err != nil {
				return nil, err
			}
			if p.copies += max(lo, hi, 1); p.copies > maxGrammarCopies {
				return nil, fmt.Errorf("the repetitions copy more than %d elements", maxGrammarCopies)
			}
			seq = append(seq[:unit], p.repeat(seq[unit:], lo, hi)...)
			start = unit
		case c == '<':
			return nil, fmt.Errorf("token references (<…>) are not supported at %q", p.rest())
		default:
			return seq, nil
		}
		unit = start
		p.space(nested)
	}
	return seq, nil
}

// repeat is unit repeated min to max times (max < 0: no bound).
func (p *grammarParser) repeat(unit []gItem, min, max int) []gItem {
	x := unit[0]
	if len(unit) > 1 {
		x = gItem{rule: p.generated("group", [][]gItem{slices.Clone(unit)})}
	}
	var out []gItem
	for range min {
		out = append(out, x)
	}
	if max < 0 { // x*: r ::= x r | ()
		r := p.generated("star", nil)
		p.rules[r] = [][]gItem{{x, {rule: r}}, {}}
		return append(out, gItem{rule: r})
	}
	if max == min {
		return out
	}
	// x{0,k} nested from the inside: o1 ::= x | (), ok ::= x o(k-1) | ().
	var inner []gItem
	for range max - min {
		r := p.generated("opt", [][]gItem{append([]gItem{x}, inner...), {}})
		inner = []gItem{{rule: r}}
	}
	return append(out, inner...)
}

// repetition parses *, +, ?, {m}, {m,}, {,n} or {m,n}.
func (p *grammarParser) repetition() (min, max int, err error) {
	c := p.src[p.pos]
	p.pos++
	switch c {
	case '*':
		return 0, -1, nil
	case '+':
		return 1, -1, nil
	case '?':
		return 0, 1, nil
	}
	end := strings.IndexByte(p.src[p.pos:], '}')
	if end < 0 {
		return 0, 0, fmt.Errorf("unclosed { at %q", p.rest())
	}
	body := strings.ReplaceAll(p.src[p.pos:p.pos+end], " ", "")
	p.pos += end + 1
	lo, hi, comma := strings.Cut(body, ",")
	if lo == "" && !comma {
		return 0, 0, fmt.Errorf("empty repetition {}")
	}
	if min, err = countOrZero(lo); err != nil {
		return 0, 0, err
	}
	switch {
	case !comma:
		max = min
	case hi == "":
		max = -1
	default:
		if max, err = countOrZero(hi); err != nil {
			return 0, 0, err
		}
	}
	if max >= 0 && max < min || min > maxRepeat || max > maxRepeat {
		return 0, 0, fmt.Errorf("repetition {%s}: want 0 ≤ m ≤ n ≤ %d", body, maxRepeat)
	}
	return min, max, nil
}

func countOrZero(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("repetition count %q is not a number", s)
	}
	return n, nil
}

// literal parses a "string".
func (p *grammarParser) literal() (string, error) {
	p.pos++ // "
	var b strings.Builder
	for p.pos < len(p.src) && p.src[p.pos] != '"' {
		r, err := p.char()
		if err != nil {
			return "", err
		}
		b.WriteRune(r)
	}
	if p.pos == len(p.src) {
		return "", fmt.Errorf("unclosed string literal")
	}
	p.pos++
	return b.String(), nil
}

// class parses a [character class].
func (p *grammarParser) class() (*gElem, error) {
	p.pos++ // [
	e := &gElem{kind: gChars}
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		e.neg = true
		p.pos++
	}
	var ranges [][2]rune
	for p.pos < len(p.src) && p.src[p.pos] != ']' {
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, fmt.Errorf("character range %q-%q is backwards", lo, hi)
			}
		}
		ranges = append(ranges, [2]rune{lo, hi})
	}
	if p.pos == len(p.src) {
		return nil, fmt.Errorf("unclosed character class")
	}
	p.pos++
	slices.SortFunc(ranges, func(a, b [2]rune) int { return int(a[0] - b[0]) })
	for _, r := range ranges {
		if n := len(e.ranges); n > 0 && r[0] <= e.ranges[n-1]+1 {
			e.ranges[n-1] = max(e.ranges[n-1], r[1])
			continue
		}
		e.ranges = append(e.ranges, r[0], r[1])
	}
	return e, nil
}

// char parses one character of a literal or class, escapes decoded.
func (p *grammarParser) char() (rune, error) {
	r, size := utf8.DecodeRuneInString(p.src[p.pos:])
	if r == utf8.RuneError && size == 1 {
		return 0, fmt.Errorf("invalid UTF-8 at %q", p.rest())
	}
	if r == '\n' {
		return 0, fmt.Errorf("a newline inside a literal or class; write \\n")
	}
	p.pos += size
	if r != '\\' {
		return r, nil
	}
	if p.pos == len(p.src) {
		return 0, fmt.Errorf("a \\ ends the grammar")
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^', '/', '.', '(', ')', '|', '*', '+', '?', '{', '}':
		return rune(c), nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if p.pos+n > len(p.src) {
			return 0, fmt.Errorf("short \\%c escape", c)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, fmt.Errorf("bad \\%c escape %q", c, p.src[p.pos:p.pos+n])
		}
		p.pos += n
		return rune(v), nil
	}
	return 0, fmt.Errorf("unknown escape \\%c", c)
}

// space skips blanks and comments, and newlines when newlines is set.
func (p *grammarParser) space(newlines bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		case (c == '\n' || c == '\r') && newlines:
			if c == '\n' {
				p.line++
			}
			p.pos++
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

func (p *grammarParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

// id is the rule named name, made (undefined) on first use.
func (p *grammarParser) id(name string) int32 {
	if id, ok := p.ids[name]; ok {
		return id
	}
	id := int32(len(p.names))
	p.ids[name] = id
	p.names = append(p.names, name)
	p.rules = append(p.rules, nil)
	return id
}

// generated adds a rule of the parser's own with alternatives alts.
func (p *grammarParser) generated(kind string, alts [][]gItem) int32 {
	id := int32(len(p.names))
	p.names = append(p.names, fmt.Sprintf("(%s %d)", kind, id))
	p.rules = append(p.rules, alts)
	return id
}

// empty is a rule that derives the empty text (for "").
func (p *grammarParser) empty() int32 { return p.generated("empty", [][]gItem{{}}) }

func (p *grammarParser) rest() string {
	r := p.src[p.pos:]
	if i := strings.IndexByte(r, '\n'); i >= 0 {
		r = r[:i]
	}
	if len(r) > 24 {
		r = r[:24] + "…"
	}
	return r
}

// checkLeftRecursion refuses a rule that can derive itself before any
// character: the recognizer would expand it forever.
func (g *grammar) checkLeftRecursion() error {
	nullable := make([]bool, len(g.alts))
	for changed := true; changed; {
		changed = false
		for r, starts := range g.alts {
			if nullable[r] {
				continue
			}
			for _, pos := range starts {
				if g.nullableFrom(pos, nullable) {
					nullable[r], changed = true, true
					break
				}
			}
		}
	}
	const (
		unseen = iota
		open
		done
	)
	state := make([]uint8, len(g.alts))
	var visit func(r int32) error
	visit = func(r int32) error {
		switch state[r] {
		case open:
			return fmt.Errorf("rule %s is left-recursive (it can derive itself before any character); rewrite a ::= a x | y as a ::= y x*", g.names[r])
		case done:
			return nil
		}
		state[r] = open
		for _, pos := range g.alts[r] {
			for ; g.elems[pos].kind == gRef; pos++ {
				if err := visit(g.elems[pos].rule); err != nil {
					return err
				}
				if !nullable[g.elems[pos].rule] {
					break
				}
			}
		}
		state[r] = done
		return nil
	}
	for r := range g.alts {
		if err := visit(int32(r)); err != nil {
			return err
		}
	}
	return nil
}

// nullableFrom reports whether the alternative from pos on can derive the
// empty text, given the rules known to.
func (g *grammar) nullableFrom(pos int32, nullable []bool) bool {
	for ; ; pos++ {
		switch e := &g.elems[pos]; e.kind {
		case gEnd:
			return true
		case gChars:
			return false
		default:
			if !nullable[e.rule] {
				return false
			}
		}
	}
}
