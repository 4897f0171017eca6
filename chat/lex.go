package chat

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer follows Jinja2's with the settings transformers compiles chat
// templates with: trim_blocks and lstrip_blocks on, keep_trailing_newline
// off, newlines normalized to "\n".

type tokenKind int

const (
	tokEOF        tokenKind = iota
	tokData                 // template text
	tokBlockBegin           // {%
	tokBlockEnd             // %}
	tokVarBegin             // {{
	tokVarEnd               // }}
	tokName
	tokString
	tokInt
	tokFloat
	tokOp
)

type token struct {
	kind tokenKind
	val  string // text, name, decoded string, number or operator
	line int
}

func (t token) String() string {
	switch t.kind {
	case tokEOF:
		return "end of template"
	case tokData:
		return "template text"
	case tokBlockBegin:
		return "'{%'"
	case tokBlockEnd:
		return "'%}'"
	case tokVarBegin:
		return "'{{'"
	case tokVarEnd:
		return "'}}'"
	case tokString:
		return "string " + strconv.Quote(t.val)
	}
	return "'" + t.val + "'"
}

// SyntaxError is a template that does not parse.
type SyntaxError struct {
	Line int    // 1-based line of the template source
	Msg  string // what is wrong
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("chat: template syntax error at line %d: %s", e.Line, e.Msg)
}

type lexer struct {
	src  string
	pos  int
	line int
	toks []token
	// lineStarting: the text before the next tag starts at the beginning
	// of a line (lstrip_blocks strips it even without a newline in it).
	lineStarting bool
}

// lex splits a template into tokens.
func lex(src string) ([]token, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	lx := &lexer{src: src, line: 1, lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{kind: tokEOF, line: lx.line})
	return lx.toks, nil
}

func (lx *lexer) errorf(format string, args ...any) error {
	return &SyntaxError{Line: lx.line, Msg: fmt.Sprintf(format, args...)}
}

func (lx *lexer) emit(kind tokenKind, val string) {
	lx.toks = append(lx.toks, token{kind: kind, val: val, line: lx.line})
}

// advance moves past n bytes, counting lines.
func (lx *lexer) advance(n int) {
	lx.line += strings.Count(lx.src[lx.pos:lx.pos+n], "\n")
	lx.pos += n
}

func (lx *lexer) run() error {
	for lx.pos < len(lx.src) {
		start := lx.nextTag(lx.pos)
		if start < 0 {
			lx.emit(tokData, lx.src[lx.pos:])
			lx.advance(len(lx.src) - lx.pos)
			return nil
		}
		open := lx.src[start : start+2]
		sign := byte(0)
		if start+2 < len(lx.src) && (lx.src[start+2] == '-' || lx.src[start+2] == '+') {
			sign = lx.src[start+2]
		}
		rawEnd := 0
		if open == "{%" {
			rawEnd = lx.matchRaw(start)
		}
		text := lx.src[lx.pos:start]
		text = lx.stripBefore(text, sign, open != "{{")
		if text != "" {
			lx.emit(tokData, text)
		}
		lx.advance(start - lx.pos)
		tagLen := 2
		if sign != 0 {
			tagLen = 3
		}
		var err error
		switch {
		case rawEnd > 0:
			lx.advance(rawEnd - lx.pos)
			err = lx.raw()
		case open == "{#":
			lx.advance(tagLen)
			err = lx.comment()
		case open == "{%":
			lx.emit(tokBlockBegin, "{%")
			lx.advance(tagLen)
			err = lx.tag("%}", true)
		default:
			lx.emit(tokVarBegin, "{{")
			lx.advance(tagLen)
			err = lx.tag("}}", false)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// nextTag finds the next "{{", "{%" or "{#" at or after i.
func (lx *lexer) nextTag(i int) int {
	for {
		j := strings.IndexByte(lx.src[i:], '{')
		if j < 0 || i+j+1 >= len(lx.src) {
			return -1
		}
		i += j
		switch lx.src[i+1] {
		case '{', '%', '#':
			return i
		}
		i++
	}
}

// stripBefore applies whitespace control to the text before a tag: all
// trailing whitespace for "-", and for lstrip_blocks the spaces between
// the last line start and a block or comment tag.
func (lx *lexer) stripBefore(text string, sign byte, block bool) string {
	if sign == '-' {
		return strings.TrimRightFunc(text, pyIsSpace)
	}
	if sign == '+' || !block {
		return text
	}
	l := strings.LastIndexByte(text, '\n') + 1
	if l > 0 || lx.lineStarting {
		rest := text[l:]
		if rest != "" && strings.TrimLeftFunc(rest, pyIsSpace) == "" {
			return text[:l]
		}
	}
	return text
}

// endTag consumes a tag end ("%}", "#}" or "}}") at the current position
// with its whitespace control: "-" strips all whitespace after it, a
// plain block or comment end drops one newline (trim_blocks), "+" keeps
// everything. It reports whether an end was there.
func (lx *lexer) endTag(end string, trim bool) bool {
	s := lx.src[lx.pos:]
	n := 0
	switch {
	case strings.HasPrefix(s, "-"+end):
		n = len(end) + 1
		n += len(s[n:]) - len(strings.TrimLeftFunc(s[n:], pyIsSpace))
	case trim && strings.HasPrefix(s, "+"+end):
		n = len(end) + 1
	case strings.HasPrefix(s, end):
		n = len(end)
		if trim && strings.HasPrefix(s[n:], "\n") {
			n++
		}
	default:
		return false
	}
	lx.lineStarting = s[n-1] == '\n'
	lx.advance(n)
	return true
}

func (lx *lexer) comment() error {
	for lx.pos < len(lx.src) {
		if lx.endTag("#}", true) {
			return nil
		}
		lx.advance(1)
	}
	return lx.errorf("missing end of comment tag")
}

// matchRaw reports the end of "{% raw %}" starting at i, or 0.
func (lx *lexer) matchRaw(i int) int {
	s := lx.src[i+2:]
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	t := strings.TrimLeftFunc(s, pyIsSpace)
	if !strings.HasPrefix(t, "raw") {
		return 0
	}
	t = strings.TrimLeftFunc(t[3:], pyIsSpace)
	switch {
	case strings.HasPrefix(t, "-%}"):
		t = strings.TrimLeftFunc(t[3:], pyIsSpace)
	case strings.HasPrefix(t, "%}"):
		t = t[2:]
	default:
		return 0
	}
	return len(lx.src) - len(t)
}

// raw emits the text up to {% endraw %} as data.
func (lx *lexer) raw() error {
	for i := lx.pos; ; {
		j := strings.Index(lx.src[i:], "{%")
		if j < 0 {
			return lx.errorf("missing end of raw directive")
		}
		i += j
		s := lx.src[i+2:]
		sign := byte(0)
		if s != "" && (s[0] == '-' || s[0] == '+') {
			sign, s = s[0], s[1:]
		}
		t := strings.TrimLeftFunc(s, pyIsSpace)
		if !strings.HasPrefix(t, "endraw") {
			i += 2
			continue
		}
		t = strings.TrimLeftFunc(t[len("endraw"):], pyIsSpace)
		if !strings.HasPrefix(t, "%}") && !strings.HasPrefix(t, "-%}") && !strings.HasPrefix(t, "+%}") {
			i += 2
			continue
		}
		lx.lineStarting = lx.pos > 0 && lx.src[lx.pos-1] == '\n'
		text := lx.stripBefore(lx.src[lx.pos:i], sign, true)
		if text != "" {
			lx.emit(tokData, text)
		}
		lx.advance(len(lx.src) - len(t) - lx.pos)
		lx.endTag("%}", true)
		return nil
	}
}

// operators, longest first.
var operators = []string{
	"**", "//", "==", "!=", "<=", ">=",
	"+", "-", "*", "/", "%", "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", ";",
}

// tag lexes the expression tokens of a block or variable tag up to its
// end, which counts only outside brackets.
func (lx *lexer) tag(end string, block bool) error {
	var stack []byte
	for {
		if len(stack) == 0 && lx.endTag(end, block) {
			if block {
				lx.emit(tokBlockEnd, end)
			} else {
				lx.emit(tokVarEnd, end)
			}
			return nil
		}
		if lx.pos >= len(lx.src) {
			if block {
				return lx.errorf("unexpected end of template, expected '%%}'")
			}
			return lx.errorf("unexpected end of template, expected '}}'")
		}
		s := lx.src[lx.pos:]
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case pyIsSpace(r):
			lx.advance(size)
		case r >= '0' && r <= '9':
			kind, n := scanNumber(s)
			lx.emit(kind, strings.ReplaceAll(s[:n], "_", ""))
			lx.advance(n)
		case r == '_' || unicode.IsLetter(r):
			n := len(s) - len(strings.TrimLeftFunc(s, isNameRune))
			lx.emit(tokName, s[:n])
			lx.advance(n)
		case r == '\'' || r == '"':
			val, n, err := scanString(s)
			if err != nil {
				return lx.errorf("%v", err)
			}
			lx.emit(tokString, val)
			lx.advance(n)
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(s, o) {
					op = o
					break
				}
			}
			if op == "" {
				return lx.errorf("unexpected character %q", r)
			}
			switch op {
			case "(":
				stack = append(stack, ')')
			case "[":
				stack = append(stack, ']')
			case "{":
				stack = append(stack, '}')
			case ")", "]", "}":
				if len(stack) == 0 {
					return lx.errorf("unexpected '%s'", op)
				}
				if want := stack[len(stack)-1]; want != op[0] {
					return lx.errorf("unexpected '%s', expected '%c'", op, want)
				}
				stack = stack[:len(stack)-1]
			}
			lx.emit(tokOp, op)
			lx.advance(len(op))
		}
	}
}

func isNameRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// scanNumber reads an integer or float literal (digits may be grouped by
// "_"; a float has a fraction, an exponent or both).
func scanNumber(s string) (tokenKind, int) {
	digits := func(i int) int {
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '_' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9') {
			i++
		}
		return i
	}
	n := digits(0)
	kind := tokInt
	if n+1 < len(s) && s[n] == '.' && s[n+1] >= '0' && s[n+1] <= '9' {
		n = digits(n + 1)
		kind = tokFloat
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		m := n + 1
		if m < len(s) && (s[m] == '+' || s[m] == '-') {
			m++
		}
		if m < len(s) && s[m] >= '0' && s[m] <= '9' {
			n = digits(m)
			kind = tokFloat
		}
	}
	return kind, n
}

// scanString reads a quoted literal and decodes Python's escapes, as
// Jinja2 does ("unicode-escape"); unknown escapes keep their backslash.
func scanString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nil
		case c != '\\':
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(s) {
			break
		}
		e := s[i+1]
		i += 2
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n > len(s) {
				return "", 0, fmt.Errorf("truncated \\%c escape in string literal", e)
			}
			v, err := strconv.ParseUint(s[i:i+n], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return "", 0, fmt.Errorf("bad \\%c escape in string literal", e)
			}
			b.WriteRune(rune(v))
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(e - '0')
			for k := 0; k < 2 && i < len(s) && s[i] >= '0' && s[i] <= '7'; k++ {
				v = v*8 + int(s[i]-'0')
				i++
			}
			b.WriteRune(rune(v))
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", 0, fmt.Errorf("unterminated string literal")
}
