package structured

// jsonState is a byte-level recognizer of one JSON object (RFC 8259) with
// optional whitespace around it: the prefixes it accepts are exactly the
// prefixes of such texts, so a generation that follows it can always be
// completed. It is a small value (the nesting is a bit stack), copied
// freely while the vocabulary is searched.
//
// Two limits keep a generation from running away inside it (small models
// in JSON mode are prone to endless whitespace; vLLM grew an option
// against it): objects and arrays nest at most maxDepth deep, and a run of
// whitespace between tokens holds at most one newline and at most
// wsLimit(depth) bytes, room for one pretty-printed line break and its
// indentation. Strings are checked to be UTF-8
// (no overlong forms or surrogates, which JSON text may not hold raw) and
// to hold no raw control characters.
type jsonState struct {
	mode  mode
	key   bool  // the string being read is an object key
	lit   uint8 // the literal being read (literals)
	idx   uint8 // bytes of the literal read, or hex digits of a \u escape still to come
	cont  uint8 // UTF-8 continuation bytes still to come
	lo    byte  // the range of the next continuation byte
	hi    byte
	ws    uint8 // length of the current whitespace run
	nl    bool  // the run holds a newline
	depth uint8
	stack [maxDepth / 64]uint64 // bit d set: level d is an array, else an object
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
	mTop      mode = iota // before the object
	mValue                // a value is due (after ':', or ',' in an array)
	mArrFirst             // after '[': a value or ']'
	mObjFirst             // after '{': a key or '}'
	mObjKey               // after ',' in an object: a key
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
	mLit                  // inside true, false or null
	mDone                 // after the object
)

var literals = [...]string{"true", "false", "null"}

// complete reports whether the text so far is a whole JSON object.
func (s *jsonState) complete() bool { return s.mode == mDone }

// inPlainString reports whether s is inside a string between characters:
// any run of bytes free of '"', '\\' and control characters that is whole
// UTF-8 keeps it there (see Vocab.plain).
func (s *jsonState) inPlainString() bool { return s.mode == mString && s.cont == 0 }

func isWS(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// step advances s past b, reporting false (s then undefined) when b cannot
// come next.
func (s *jsonState) step(b byte) bool {
	switch s.mode {
	case mString:
		return s.stringByte(b)
	case mEscape:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.mode = mString
		case 'u':
			s.mode, s.idx = mHex, 4
		default:
			return false
		}
		return true
	case mHex:
		if !('0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F') {
			return false
		}
		if s.idx--; s.idx == 0 {
			s.mode = mString
		}
		return true
	case mLit:
		lit := literals[s.lit]
		if b != lit[s.idx] {
			return false
		}
		if s.idx++; int(s.idx) == len(lit) {
			s.mode = mAfter
		}
		return true
	case mMinus, mZero, mInt, mDot, mFrac, mExp, mExpSign, mExpInt:
		return s.numberByte(b)
	}
	// Structural modes: whitespace may come between tokens.
	if isWS(b) {
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
	case mTop:
		return b == '{' && s.push(false)
	case mValue:
		return s.value(b)
	case mArrFirst:
		if b == ']' {
			return s.pop(true)
		}
		return s.value(b)
	case mObjFirst:
		if b == '}' {
			return s.pop(false)
		}
		fallthrough
	case mObjKey:
		if b != '"' {
			return false
		}
		s.mode, s.key = mString, true
		return true
	case mColon:
		if b != ':' {
			return false
		}
		s.mode = mValue
		return true
	case mAfter:
		arr := s.top()
		switch {
		case b == ',' && arr:
			s.mode = mValue
		case b == ',':
			s.mode = mObjKey
		case b == ']' && arr, b == '}' && !arr:
			return s.pop(arr)
		default:
			return false
		}
		return true
	}
	return false // mDone: only whitespace
}

// value starts a value with its first byte b.
func (s *jsonState) value(b byte) bool {
	switch {
	case b == '{':
		return s.push(false)
	case b == '[':
		return s.push(true)
	case b == '"':
		s.mode, s.key = mString, false
	case b == '-':
		s.mode = mMinus
	case b == '0':
		s.mode = mZero
	case '1' <= b && b <= '9':
		s.mode = mInt
	default:
		for i, lit := range literals {
			if b == lit[0] {
				s.mode, s.lit, s.idx = mLit, uint8(i), 1
				return true
			}
		}
		return false
	}
	return true
}

// stringByte reads one byte inside a string.
func (s *jsonState) stringByte(b byte) bool {
	if s.cont > 0 {
		if b < s.lo || b > s.hi {
			return false
		}
		s.cont--
		s.lo, s.hi = 0x80, 0xBF
		return true
	}
	switch {
	case b == '"':
		s.mode = mAfter
		if s.key {
			s.mode = mColon
		}
	case b == '\\':
		s.mode = mEscape
	case b < 0x20:
		return false
	case b < 0x80:
	case 0xC2 <= b && b <= 0xDF:
		s.cont, s.lo, s.hi = 1, 0x80, 0xBF
	case b == 0xE0:
		s.cont, s.lo, s.hi = 2, 0xA0, 0xBF // no overlong forms
	case b == 0xED:
		s.cont, s.lo, s.hi = 2, 0x80, 0x9F // no surrogates
	case 0xE1 <= b && b <= 0xEF:
		s.cont, s.lo, s.hi = 2, 0x80, 0xBF
	case b == 0xF0:
		s.cont, s.lo, s.hi = 3, 0x90, 0xBF
	case 0xF1 <= b && b <= 0xF3:
		s.cont, s.lo, s.hi = 3, 0x80, 0xBF
	case b == 0xF4:
		s.cont, s.lo, s.hi = 3, 0x80, 0x8F // nothing above U+10FFFF
	default:
		return false
	}
	return true
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
	switch {
	case digit && (s.mode == mInt || s.mode == mFrac || s.mode == mExpInt):
		return true
	case b == '.' && (s.mode == mZero || s.mode == mInt):
		s.mode = mDot
		return true
	case (b == 'e' || b == 'E') && s.mode != mExpInt:
		s.mode = mExp
		return true
	}
	// Anything else ends the number and is read after it; the object at
	// the top means a number is always inside a container, so it ends
	// only at a delimiter.
	s.mode = mAfter
	return s.step(b)
}

// top reports whether the innermost open container is an array.
func (s *jsonState) top() bool {
	d := s.depth - 1
	return s.stack[d/64]&(1<<(d%64)) != 0
}

// push opens a container.
func (s *jsonState) push(arr bool) bool {
	if s.depth == maxDepth {
		return false
	}
	d := s.depth
	if arr {
		s.stack[d/64] |= 1 << (d % 64)
		s.mode = mArrFirst
	} else {
		s.stack[d/64] &^= 1 << (d % 64)
		s.mode = mObjFirst
	}
	s.depth++
	return true
}

// pop closes the innermost container, an array when arr.
func (s *jsonState) pop(arr bool) bool {
	if s.depth == 0 || s.top() != arr {
		return false
	}
	s.depth--
	s.mode = mAfter
	if s.depth == 0 {
		s.mode = mDone
	}
	return true
}
