package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The model's vocab and merges are most of a tokenizer.json (9 MB for Llama
// 3) and encoding/json decodes them slowly through reflection, so they get
// hand-written decoders. json.Unmarshal has already checked that the whole
// document is valid JSON when these run.

// vocabJSON is the model's vocab: an object from token to id.
type vocabJSON struct {
	m         map[string]int
	notObject bool // some other JSON value (a Unigram model's list, say)
}

func (v *vocabJSON) UnmarshalJSON(data []byte) error {
	p := jsonScanner{data: data}
	if p.skipSpace() != '{' {
		v.notObject = true
		return nil
	}
	p.i++
	v.m = make(map[string]int, len(data)/16)
	if p.skipSpace() == '}' {
		return nil
	}
	for {
		key, err := p.str()
		if err != nil {
			return fmt.Errorf("vocab: %w", err)
		}
		if err := p.expect(':'); err != nil {
			return fmt.Errorf("vocab: %w", err)
		}
		id, err := p.integer()
		if err != nil {
			return fmt.Errorf("vocab: token %q: %w", key, err)
		}
		v.m[key] = id
		if done, err := p.endOf('}'); err != nil || done {
			return err
		}
	}
}

// mergesJSON is the model's merges: "a b" strings, or ["a", "b"] pairs.
type mergesJSON struct {
	pairs   [][2]string
	present bool
}

func (m *mergesJSON) UnmarshalJSON(data []byte) error {
	p := jsonScanner{data: data}
	switch p.skipSpace() {
	case 'n':
		return nil
	case '[':
	default:
		return errors.New("merges: not a list")
	}
	m.present = true
	p.i++
	if p.skipSpace() == ']' {
		return nil
	}
	pairs := p.skipSpace() == '['
	for n := 0; ; n++ {
		var pair [2]string
		switch c := p.skipSpace(); {
		case c == '[' && pairs:
			p.i++
			for k := 0; ; k++ {
				s, err := p.str()
				if err != nil {
					return fmt.Errorf("merge %d: %w", n, err)
				}
				if k < 2 {
					pair[k] = s
				}
				done, err := p.endOf(']')
				if err != nil {
					return fmt.Errorf("merge %d: %w", n, err)
				}
				if done {
					if k != 1 {
						return fmt.Errorf("merge %d: want 2 tokens, got %d", n, k+1)
					}
					break
				}
			}
		case c == '"' && !pairs:
			s, err := p.str()
			if err != nil {
				return fmt.Errorf("merge %d: %w", n, err)
			}
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return fmt.Errorf("merge %d: %q is not two tokens separated by a space", n, s)
			}
			pair = [2]string{a, b}
		default:
			return fmt.Errorf("merges: merge %d is neither a string nor a pair like the first", n)
		}
		m.pairs = append(m.pairs, pair)
		if done, err := p.endOf(']'); err != nil || done {
			return err
		}
	}
}

// jsonScanner reads values from valid JSON.
type jsonScanner struct {
	data []byte
	i    int
}

// skipSpace skips whitespace and returns the next byte (0 at the end).
func (p *jsonScanner) skipSpace() byte {
	for p.i < len(p.data) {
		switch c := p.data[p.i]; c {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return c
		}
	}
	return 0
}

func (p *jsonScanner) expect(c byte) error {
	if p.skipSpace() != c {
		return fmt.Errorf("expected %q at byte %d", c, p.i)
	}
	p.i++
	return nil
}

// endOf consumes the "," between elements or the closing byte of a list
// or object, reporting which.
func (p *jsonScanner) endOf(closing byte) (done bool, err error) {
	switch p.skipSpace() {
	case ',':
		p.i++
		return false, nil
	case closing:
		p.i++
		return true, nil
	}
	return false, fmt.Errorf("expected ',' or %q at byte %d", closing, p.i)
}

// str reads a string. Strings with escapes or invalid UTF-8 go through
// encoding/json for its exact rules.
func (p *jsonScanner) str() (string, error) {
	if p.skipSpace() != '"' {
		return "", fmt.Errorf("expected a string at byte %d", p.i)
	}
	start := p.i + 1
	plain := true
	j := start
	for ; j < len(p.data); j++ {
		c := p.data[j]
		if c == '"' {
			break
		}
		if c == '\\' {
			plain = false
			j++
		} else if c >= utf8.RuneSelf {
			plain = false
		}
	}
	if j >= len(p.data) {
		return "", errors.New("unterminated string")
	}
	p.i = j + 1
	raw := p.data[start:j]
	if plain || (utf8.Valid(raw) && !strings.ContainsRune(string(raw), '\\')) {
		return string(raw), nil
	}
	var s string
	if err := json.Unmarshal(p.data[start-1:j+1], &s); err != nil {
		return "", err
	}
	return s, nil
}

// integer reads a JSON number that is an int.
func (p *jsonScanner) integer() (int, error) {
	p.skipSpace()
	start := p.i
	for p.i < len(p.data) {
		c := p.data[p.i]
		if (c < '0' || c > '9') && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' {
			break
		}
		p.i++
	}
	n, err := strconv.Atoi(string(p.data[start:p.i]))
	if err != nil {
		return 0, fmt.Errorf("id %q is not an integer", p.data[start:p.i])
	}
	return n, nil
}
