package toolcall

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Llama 4's markers around a pythonic list of calls; without special
// tokens in the text they are gone already.
const (
	pythonStart = "<|python_start|>"
	pythonEnd   = "<|python_end|>"
)

// parsePythonic reads a whole message written in the pythonic syntax, a
// Python list of calls with keyword arguments of literal values:
// [get_weather(city="Paris", days=3), get_time(zone='CET')]. Strings (in
// either quotes, with Python's escapes), numbers, True, False, None, and
// lists and dicts of them become JSON. It fails unless the text is such
// a list and every function is one of names.
func parsePythonic(text string, names []string) ([]call, bool) {
	text = strings.TrimSpace(text)
	text = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(text, pythonStart), pythonEnd))
	p := &pyParser{s: text}
	var calls []call
	var commas strings.Builder // items writes them; a list of calls has no use for them
	if !p.eat('[') || !p.items(&commas, ']', func() bool {
		c, ok := p.call(names)
		calls = append(calls, c)
		return ok
	}) {
		return nil, false
	}
	p.space()
	if len(calls) == 0 || p.i != len(p.s) {
		return nil, false
	}
	return calls, true
}

// pyParser reads Python literal syntax from s at i.
type pyParser struct {
	s     string
	i     int
	depth int
}

// maxPyDepth bounds the nesting of lists and dicts in arguments.
const maxPyDepth = 100

func (p *pyParser) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

// eat skips spaces and then c, reporting whether c was there.
func (p *pyParser) eat(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *pyParser) ident() string {
	p.space()
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || p.i > start && (c >= '0' && c <= '9' || c == '.') {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

// call reads name(key=value, ...) into a call with JSON arguments.
func (p *pyParser) call(names []string) (call, bool) {
	name := p.ident()
	if !slices.Contains(names, name) || !p.eat('(') {
		return call{}, false
	}
	var args strings.Builder
	args.WriteByte('{')
	var seen []string
	ok := p.items(&args, ')', func() bool {
		key := p.ident()
		if key == "" || slices.Contains(seen, key) || !p.eat('=') {
			return false
		}
		seen = append(seen, key)
		k, _ := json.Marshal(key)
		args.Write(k)
		args.WriteByte(':')
		return p.value(&args)
	})
	if !ok {
		return call{}, false
	}
	args.WriteByte('}')
	return call{name: name, args: args.String()}, true
}

// value reads one literal and writes it as JSON.
func (p *pyParser) value(out *strings.Builder) bool {
	p.space()
	if p.i >= len(p.s) {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '"' || c == '\'':
		s, ok := p.str()
		if ok {
			b, _ := json.Marshal(s)
			out.Write(b)
		}
		return ok
	case c == '[' || c == '{':
		if p.depth++; p.depth > maxPyDepth {
			return false
		}
		defer func() { p.depth-- }()
		p.i++
		if c == '[' {
			return p.list(out)
		}
		return p.dict(out)
	case c == '-' || c == '+' || c == '.' || c >= '0' && c <= '9':
		return p.number(out)
	}
	for word, js := range map[string]string{"True": "true", "False": "false", "None": "null"} {
		if strings.HasPrefix(p.s[p.i:], word) {
			p.i += len(word)
			out.WriteString(js)
			return true
		}
	}
	return false
}

// items reads the comma-separated items of a list or dict up to close
// (a trailing comma allowed), writing the commas between them.
func (p *pyParser) items(out *strings.Builder, close byte, item func() bool) bool {
	for n := 0; !p.eat(close); n++ {
		if n > 0 {
			if !p.eat(',') {
				return false
			}
			if p.eat(close) {
				break
			}
			out.WriteByte(',')
		}
		if !item() {
			return false
		}
	}
	return true
}

func (p *pyParser) list(out *strings.Builder) bool {
	out.WriteByte('[')
	ok := p.items(out, ']', func() bool { return p.value(out) })
	out.WriteByte(']')
	return ok
}

func (p *pyParser) dict(out *strings.Builder) bool {
	out.WriteByte('{')
	ok := p.items(out, '}', func() bool {
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != '"' && p.s[p.i] != '\'' {
			return false // JSON objects have string keys
		}
		key, ok := p.str()
		if !ok || !p.eat(':') {
			return false
		}
		b, _ := json.Marshal(key)
		out.Write(b)
		out.WriteByte(':')
		return p.value(out)
	})
	out.WriteByte('}')
	return ok
}

// number reads a Python int or float and writes it as JSON.
func (p *pyParser) number(out *strings.Builder) bool {
	start := p.i
	for p.i < len(p.s) && strings.IndexByte("+-.0123456789eE_", p.s[p.i]) >= 0 {
		p.i++
	}
	lit := strings.ReplaceAll(p.s[start:p.i], "_", "")
	if i, err := strconv.ParseInt(lit, 10, 64); err == nil {
		out.WriteString(strconv.FormatInt(i, 10))
		return true
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return false
	}
	b, err := json.Marshal(f) // fails on Inf and NaN, which JSON lacks
	out.Write(b)
	return err == nil
}

// str reads a quoted string at i with Python's escapes.
func (p *pyParser) str() (string, bool) {
	q := p.s[p.i]
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), true
		case c == '\n':
			return "", false
		case c != '\\':
			b.WriteByte(c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			return "", false
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if p.i+n > len(p.s) {
				return "", false
			}
			v, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
			if err != nil || !utf8.ValidRune(rune(v)) {
				return "", false
			}
			b.WriteRune(rune(v))
			p.i += n
		default: // Python keeps an unknown escape as written
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", false
}
