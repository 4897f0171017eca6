package structured

import (
	"math/bits"
	"sort"
)

// jsonState is a byte-level recognizer of one JSON value (RFC 8259) that
// a compiled schema (node) allows, with whitespace around its tokens: the
// prefixes it accepts are exactly the prefixes of such texts, so a
// generation that follows it can always be completed. It is a small value
// (the open containers are a linked list of frames that never change once
// made), copied freely while the vocabulary is searched.
//
// Two limits keep a generation from running away inside it (small models
// in JSON mode are prone to endless whitespace; vLLM grew an option
// against it): containers nest at most maxDepth deep, and a run of
// whitespace between tokens holds at most one newline and at most
// wsLimit(depth) bytes, room for one pretty-printed line break and its
// indentation, and a carriage return only before a newline (small
// models otherwise fill the runs with them). Strings are checked to be UTF-8 (no overlong forms or
// surrogates, which JSON text may not hold raw) and to hold no raw control
// characters.
type jsonState struct {
	top   *frame // the open containers, innermost first; nil at the top level
	mode  mode
	val   *node   // the value due (mTop, mValue); the string or number being read
	key   bool    // the string being read is a free key (a map object's)
	idx   uint8   // hex digits of a \u escape still to come
	dec   utf8Dec // a character written as itself, begun (its UTF-8 bytes)
	ws    uint8   // length of the current whitespace run
	nl    bool    // the run holds a newline
	depth uint8

	next  int    // the innermost container's progress: an object's next declared property, an array's items so far
	cand  uint64 // a declared key being read: the properties it may still be (bit i: props[i])
	pos   int    // bytes matched of the key or literal being read
	chars int    // characters of the string being read

	lits     []string // the literal values being matched, sorted
	llo, lhi int      // the ones still matching: lits[llo:lhi]

	raw     bool // the text is one of a choice's strings, or what a regex allows, as it is, not JSON: no whitespace around it
	compact bool // no whitespace between tokens
	cr      bool // a carriage return was read: a newline must follow

	// A string with a pattern: the regex's state after the characters so
	// far, and the bits of a \u escape being read, whose runes must still
	// lead somewhere (a UTF-8 sequence's are dec's).
	rx  int32
	cp  rune
	sur rune // a \u escape's high surrogate half, whose low half must follow; 0: none

	// A Tagged format (tag.go): free text with tagged spans, each one
	// value of root.
	tag   *tag
	root  *node
	tmode uint8
	tpos  int
	spans int // spans closed
}

// frame is one open container, and the enclosing one's progress to
// restore when it closes.
type frame struct {
	parent *frame
	n      *node
	arr    bool
	next   int
}

// Limits of jsonState.
const (
	maxDepth      = 128
	maxWhitespace = 64
)

// wsLimit is the longest whitespace run at nesting depth d: a newline and
// four columns of indentation a level, or two bytes at the top level.
func wsLimit(d uint8) int { return min(2+4*int(d), maxWhitespace) }

type mode uint8

const (
	mTop      mode = iota // before the value
	mValue                // a value is due (after ':', or ',' in an array)
	mArrFirst             // after '[': a value or ']'
	mObjFirst             // after '{': a key or '}'
	mObjKey               // after ',' in an object: a key
	mKey                  // inside a declared key
	mColon                // after a key
	mAfter                // after a value: ',' or the closing bracket
	mString               // inside a string
	mEscape               // after a backslash in a string
	mHex                  // inside \uXXXX
	mMinus                // number: after '-'
	mZero                 // number: a leading 0
	mInt                  // number: integer digits
	mDot                  // number: after '.'
	mFrac                 // number: fraction digits
	mExp                  // number: after 'e'
	mExpSign              // number: after the exponent's sign
	mExpInt               // number: exponent digits
	mLit                  // inside a literal: true, false, null, or an enum's value
	mDone                 // after the value
)

var (
	boolLits = []string{"false", "true"}
	nullLits = []string{"null"}
)

// newState is the recognizer of a value that root allows, or with raw of
// plain text: one of root's literals (Choice) or what its pattern
// allows (Regex).
func newState(root *node, raw bool) jsonState {
	if raw && root.pattern != nil {
		return jsonState{mode: mString, val: root, raw: true}
	}
	return jsonState{mode: mTop, val: root, raw: raw}
}

// newTaggedState is the recognizer of free text with tagged spans, each
// one value that root allows.
func newTaggedState(root *node, t *tag) jsonState {
	return jsonState{mode: mTop, val: root, root: root, tag: t, tmode: tFree}
}

// complete reports whether the text so far is a whole value: past its
// end, a choice that another choice extends, or plain text its regex
// accepts (the end token decides).
func (s *jsonState) complete() bool {
	if t := s.tag; t != nil {
		return s.tmode == tFree && (!t.only || s.tpos == 0 && s.spans > 0)
	}
	switch {
	case s.mode == mDone:
		return !s.cr
	case !s.raw:
		return false
	case s.mode == mLit:
		return len(s.lits[s.llo]) == s.pos
	}
	return s.mode == mString && s.dec.cont == 0 && s.val.pattern.states[s.rx].accept
}

// atPattern reports whether s is inside a string with a pattern (or the
// plain text of a Regex), between characters, and where: there what a
// token free of '"', '\\' and control characters (any token, in plain
// text) allows depends on the pattern's state alone.
func (s *jsonState) atPattern() (patternAt, bool) {
	if s.tag != nil && s.tmode != tInner || s.mode != mString || s.dec.cont != 0 || s.sur != 0 || s.val == nil || s.val.pattern == nil {
		return patternAt{}, false
	}
	return patternAt{s.val, s.rx}, true
}

// inPlainString reports whether s is inside a string with no length
// bound and no pattern, between characters: any run of bytes free of
// '"', '\\' and control characters that is whole UTF-8 is allowed there
// and keeps it there (see Vocab.plain).
func (s *jsonState) inPlainString() bool {
	return (s.tag == nil || s.tmode == tInner) && s.mode == mString && s.dec.cont == 0 && s.sur == 0 && (s.val == nil || s.val.maxLen < 0 && s.val.pattern == nil)
}

func isWS(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// step advances s past b, reporting false (s then undefined) when b cannot
// come next.
func (s *jsonState) step(b byte) bool {
	if s.tag != nil {
		switch {
		case s.tmode != tInner:
			return s.tagByte(b)
		case s.mode == mDone && b == s.tag.close[0] && !s.cr: // the value is whole: its closing tag
			s.tmode, s.tpos = tClosing, 1
			if len(s.tag.close) == 1 {
				s.tmode, s.tpos = tFree, 0
			}
			return true
		}
	}
	switch s.mode {
	case mString:
		return s.stringByte(b)
	case mEscape:
		if s.sur != 0 && b != 'u' {
			return false // a high surrogate's low half must follow
		}
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.mode = mString
			return s.patternRune(rune(escaped[b]))
		case 'u':
			s.mode, s.idx, s.cp = mHex, 4, 0
			return true
		}
		return false
	case mHex:
		d, ok := hexDigit(b)
		if !ok {
			return false
		}
		s.idx--
		s.cp = s.cp<<4 | d
		free := 4 * int(s.idx)
		lo, hi := s.cp<<free, s.cp<<free|(1<<free-1) // the values the escape may still take
		if s.sur != 0 {                              // the low half of a pair
			lo, hi = max(lo, 0xDC00), min(hi, 0xDFFF)
			switch {
			case lo > hi:
				return false
			case s.idx > 0:
				return s.patternLive(pair(s.sur, lo), pair(s.sur, hi))
			}
			c := pair(s.sur, s.cp)
			s.mode, s.sur = mString, 0
			return s.patternRune(c)
		}
		if s.idx > 0 {
			return s.escapeLive(lo, hi)
		}
		s.mode = mString
		switch {
		case 0xD800 <= s.cp && s.cp <= 0xDBFF: // a high half: its pair is the character
			s.sur = s.cp
			return s.patternLive(pair(s.cp, 0xDC00), pair(s.cp, 0xDFFF))
		case 0xDC00 <= s.cp && s.cp <= 0xDFFF:
			return false // a low half alone is no character
		}
		return s.patternRune(s.cp)
	case mKey:
		return s.keyByte(b)
	case mLit:
		return s.litByte(b)
	case mMinus, mZero, mInt, mDot, mFrac, mExp, mExpSign, mExpInt:
		return s.numberByte(b)
	}
	// Structural modes: whitespace may come between tokens.
	if s.cr { // a carriage return stands only before a newline, as JSON writers put it
		if b != '\n' {
			return false
		}
		s.cr = false
	}
	if isWS(b) && !s.raw {
		if s.compact {
			return false
		}
		s.cr = b == '\r'
		if b == '\n' {
			if s.nl {
				return false
			}
			s.nl = true
		}
		if s.ws++; int(s.ws) > wsLimit(s.depth) {
			return false
		}
		return true
	}
	s.ws, s.nl = 0, false
	switch s.mode {
	case mTop, mValue:
		return s.value(s.val, b)
	case mArrFirst:
		n := s.top.n
		if b == ']' {
			return n.minItems == 0 && s.pop()
		}
		return n.maxItems != 0 && s.value(n.items, b)
	case mObjFirst:
		if b == '}' {
			return s.mayClose() && s.pop()
		}
		fallthrough
	case mObjKey:
		return b == '"' && s.startKey()
	case mColon:
		if b != ':' {
			return false
		}
		s.mode = mValue
		return true
	case mAfter:
		f := s.top
		switch {
		case f.arr && b == ',':
			if f.n.maxItems >= 0 && s.next >= f.n.maxItems {
				return false
			}
			s.mode, s.val = mValue, f.n.items
		case f.arr && b == ']':
			return s.next >= f.n.minItems && s.pop()
		case !f.arr && b == ',':
			if f.n.extra == nil && s.candidates() == 0 {
				return false
			}
			s.mode = mObjKey
		case !f.arr && b == '}':
			return s.mayClose() && s.pop()
		default:
			return false
		}
		return true
	}
	return false // mDone: only whitespace
}

// value starts a value that n allows with its first byte b.
func (s *jsonState) value(n *node, b byte) bool {
	if n.lits != nil {
		return s.startLit(n.lits, b)
	}
	var k kind
	switch {
	case b == '{':
		k = kObject
	case b == '[':
		k = kArray
	case b == '"':
		k = kString
	case b == '-' || '0' <= b && b <= '9':
		k = kNumber
	case b == 't' || b == 'f':
		k = kBool
	case b == 'n':
		k = kNull
	default:
		return false
	}
	sub := n.byKind[k]
	for sub != nil && sub.byKind[k] != sub { // an anyOf's alternative that is itself one
		sub = sub.byKind[k]
	}
	if sub == nil {
		return false
	}
	switch k {
	case kObject, kArray:
		return s.push(sub, k == kArray)
	case kString:
		s.mode, s.key, s.val, s.chars, s.rx = mString, false, sub, 0, 0
	case kNumber:
		s.val = sub
		switch {
		case b == '-':
			s.mode = mMinus
		case b == '0':
			s.mode = mZero
		default:
			s.mode = mInt
		}
	case kBool:
		return s.startLit(boolLits, b)
	case kNull:
		return s.startLit(nullLits, b)
	}
	return true
}

// ended moves past a value that is complete: the top-level one, or a
// member or item of the innermost container.
func (s *jsonState) ended() {
	if s.top == nil {
		s.mode = mDone
		return
	}
	f := s.top
	if f.arr {
		s.next++
	} else if f.n.variants != nil && s.mode == mLit {
		if v := f.n.variants[s.lits[s.llo]]; v != nil { // the tag: the rest of the object is v's
			s.top = &frame{parent: f.parent, n: v, next: f.next}
		}
	}
	s.mode = mAfter
}

// escaped is the character of each one-letter JSON escape.
var escaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func hexDigit(b byte) (rune, bool) {
	switch {
	case '0' <= b && b <= '9':
		return rune(b - '0'), true
	case 'a' <= b && b <= 'f':
		return rune(b-'a') + 10, true
	case 'A' <= b && b <= 'F':
		return rune(b-'A') + 10, true
	}
	return 0, false
}

// patternRune follows a whole character of a string through its
// pattern, if it has one.
func (s *jsonState) patternRune(c rune) bool {
	if s.val == nil || s.val.pattern == nil {
		return true
	}
	s.rx = s.val.pattern.step(s.rx, c)
	return s.rx >= 0
}

// patternLive reports whether a character begun so far, now one of
// lo..hi, can still be one the pattern takes next; true without a
// pattern. Surrogates are no characters.
func (s *jsonState) patternLive(lo, hi rune) bool {
	if s.val == nil || s.val.pattern == nil {
		return true
	}
	r := s.val.pattern
	return r.live(s.rx, lo, min(hi, 0xD7FF)) || r.live(s.rx, max(lo, 0xE000), hi)
}

// pair is the character a UTF-16 surrogate pair spells.
func pair(hi, lo rune) rune { return 0x10000 + (hi-0xD800)<<10 + (lo - 0xDC00) }

// escapeLive reports whether a \u escape whose value is now one of lo..hi
// can still spell a character the string takes: one of the Basic
// Multilingual Plane, or, as a high surrogate half, one of the pairs it
// begins.
func (s *jsonState) escapeLive(lo, hi rune) bool {
	if lo < 0xD800 && s.patternLive(lo, min(hi, 0xD7FF)) || hi > 0xDFFF && s.patternLive(max(lo, 0xE000), hi) {
		return true
	}
	hlo, hhi := max(lo, 0xD800), min(hi, 0xDBFF)
	return hlo <= hhi && s.patternLive(pair(hlo, 0xDC00), pair(hhi, 0xDFFF))
}

// stringByte reads one byte inside a string (or the plain text of a
// Regex).
func (s *jsonState) stringByte(b byte) bool {
	if s.dec.cont > 0 {
		return s.textByte(b)
	}
	n := s.val
	if s.raw { // plain text: every byte is the text's
		return s.textByte(b)
	}
	if s.sur != 0 { // the low half's escape, no character of its own
		if b != '\\' {
			return false
		}
		s.mode = mEscape
		return true
	}
	if b == '"' {
		if s.key {
			s.mode = mColon
			s.val = s.top.n.extra
			return true
		}
		if s.chars < n.minLen || n.pattern != nil && !n.pattern.states[s.rx].accept {
			return false
		}
		s.ended()
		return true
	}
	if n != nil && n.maxLen >= 0 && s.chars == n.maxLen || b < 0x20 {
		return false
	}
	s.chars++
	if b == '\\' {
		s.mode = mEscape
		return s.escapeLive(0, 0xFFFF)
	}
	return s.textByte(b)
}

// textByte reads a byte of a character written as itself (UTF-8, no
// overlong forms or surrogates) and follows the character through the
// pattern: whole, or, begun, the characters it may still be.
func (s *jsonState) textByte(b byte) bool {
	if !s.dec.feed(b) {
		return false
	}
	if s.dec.cont > 0 {
		return s.patternLive(s.dec.span())
	}
	return s.patternRune(s.dec.cp)
}

// numberByte reads one byte of a number, or the byte after it.
func (s *jsonState) numberByte(b byte) bool {
	digit := '0' <= b && b <= '9'
	switch s.mode {
	case mMinus:
		switch {
		case b == '0':
			s.mode = mZero
		case digit:
			s.mode = mInt
		default:
			return false
		}
		return true
	case mDot:
		if !digit {
			return false
		}
		s.mode = mFrac
		return true
	case mExp:
		switch {
		case b == '+' || b == '-':
			s.mode = mExpSign
		case digit:
			s.mode = mExpInt
		default:
			return false
		}
		return true
	case mExpSign:
		if !digit {
			return false
		}
		s.mode = mExpInt
		return true
	}
	// mZero, mInt, mFrac, mExpInt: the number may end here.
	integer := s.val.integer
	switch {
	case digit && (s.mode == mInt || s.mode == mFrac || s.mode == mExpInt):
		return true
	case b == '.' && !integer && (s.mode == mZero || s.mode == mInt):
		s.mode = mDot
		return true
	case (b == 'e' || b == 'E') && !integer && s.mode != mExpInt:
		s.mode = mExp
		return true
	}
	// Anything else ends the number and is read after it. The root is an
	// object, so a number is always inside a container and ends only at
	// a delimiter.
	s.ended()
	return s.step(b)
}

// startLit starts matching one of lits (sorted) with its first byte.
func (s *jsonState) startLit(lits []string, b byte) bool {
	s.mode, s.lits, s.llo, s.lhi, s.pos = mLit, lits, 0, len(lits), 0
	return s.litByte(b)
}

// litByte reads one byte of a literal: the values still matching are
// those with b next. When none is, a value that is complete ends, and b
// is read after it (a number among the values ends only at a
// delimiter); when the one value left is complete, it ends at once.
func (s *jsonState) litByte(b byte) bool {
	// The values still matching share their first pos bytes and are
	// sorted by the next one, a value that ends there first (-1).
	next := func(i int) int {
		if l := s.lits[s.llo+i]; len(l) > s.pos {
			return int(l[s.pos])
		}
		return -1
	}
	n := s.lhi - s.llo
	var lo, end int
	if n <= 8 { // true, false, null, a short enum: a scan
		for lo < n && next(lo) < int(b) {
			lo++
		}
		for end = lo; end < n && next(end) == int(b); end++ {
		}
	} else { // an integer range's thousands
		lo = sort.Search(n, func(i int) bool { return next(i) >= int(b) })
		end = sort.Search(n, func(i int) bool { return next(i) > int(b) })
	}
	lo, end = s.llo+lo, s.llo+end
	if lo == end {
		if len(s.lits[s.llo]) == s.pos { // sorted: a complete value comes first
			s.ended()
			return s.step(b)
		}
		return false
	}
	s.llo, s.lhi = lo, end
	s.pos++
	if end-lo == 1 && len(s.lits[lo]) == s.pos {
		s.ended()
	}
	return true
}

// candidates is the set of declared properties that may come next in the
// innermost object: the next one, and each after it while those before
// are optional.
func (s *jsonState) candidates() uint64 {
	var c uint64
	for i, p := range s.top.n.props[s.next:] {
		c |= 1 << (s.next + i)
		if p.required {
			break
		}
	}
	return c
}

// mayClose reports whether the innermost object may end here: no
// required property is left.
func (s *jsonState) mayClose() bool {
	for _, p := range s.top.n.props[s.next:] {
		if p.required {
			return false
		}
	}
	return true
}

// startKey reads the opening quote of a key.
func (s *jsonState) startKey() bool {
	n := s.top.n
	if n.extra != nil {
		s.mode, s.key, s.val, s.chars = mString, true, nil, 0
		return true
	}
	if s.cand = s.candidates(); s.cand == 0 {
		return false
	}
	s.mode, s.pos = mKey, 1
	return true
}

// keyByte reads one byte of a declared key; the key is whole when it
// spells one property's (its closing quote cannot end another's).
func (s *jsonState) keyByte(b byte) bool {
	props := s.top.n.props
	var c uint64
	for rest := s.cand; rest != 0; rest &= rest - 1 {
		i := bits.TrailingZeros64(rest)
		if k := props[i].key; s.pos < len(k) && k[s.pos] == b {
			c |= 1 << i
		}
	}
	if c == 0 {
		return false
	}
	s.cand = c
	s.pos++
	for rest := c; rest != 0; rest &= rest - 1 {
		if i := bits.TrailingZeros64(rest); len(props[i].key) == s.pos {
			s.mode, s.next, s.val = mColon, i+1, props[i].value
			break
		}
	}
	return true
}

// push opens a container that n governs.
func (s *jsonState) push(n *node, arr bool) bool {
	if s.depth == maxDepth {
		return false
	}
	s.top = &frame{parent: s.top, n: n, arr: arr, next: s.next}
	s.next = 0
	s.depth++
	s.mode = mObjFirst
	if arr {
		s.mode = mArrFirst
	}
	return true
}

// pop closes the innermost container.
func (s *jsonState) pop() bool {
	s.next = s.top.next
	s.top = s.top.parent
	s.depth--
	s.ended()
	return true
}
