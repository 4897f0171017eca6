package structured

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// run feeds text to a fresh recognizer and returns how many bytes it took
// and whether the text is a whole object.
func run(text string) (int, bool) {
	s := newState(anyObject, false)
	for i := 0; i < len(text); i++ {
		if !s.step(text[i]) {
			return i, false
		}
	}
	return len(text), s.complete()
}

func TestJSONStateAccepts(t *testing.T) {
	for _, text := range []string{
		`{}`, ` {}`, "{}\n", `{"a":1}`, `{"a": -0.5e+10, "b": [true, false, null], "c": {"d": []}}`,
		`{"k": "esc \" \\ \/ \b \f \n \r \t \u00e9\uD83D\uDE00"}`, `{"é": "日本語 😀"}`, `{"n": [0, -0, 1.0, 2E5, 3e-2, 45]}`,
		`{"a":[[[[]]]]}`, "{\n  \"a\" : 1 ,\n  \"b\" : [ 1 , 2 ]\n}",
	} {
		if n, ok := run(text); n != len(text) || !ok {
			t.Errorf("%q: took %d of %d bytes, complete %v", text, n, len(text), ok)
		}
		if !json.Valid([]byte(text)) {
			t.Fatalf("test case %q is not JSON", text)
		}
		// Every prefix is accepted, and only the whole is complete.
		for i := 1; i < len(text); i++ {
			if n, ok := run(text[:i]); n != i || ok && strings.TrimSpace(text[i:]) != "" {
				t.Errorf("%q: prefix %q took %d bytes, complete %v", text, text[:i], n, ok)
			}
		}
	}
}

func TestJSONStateRefuses(t *testing.T) {
	for text, at := range map[string]int{
		`[]`: 0, `"a"`: 0, `1`: 0, `x`: 0, // the top is an object
		`{}}`: 2, `{} {}`: 3, `{]`: 1, `{"a":1]`: 6, `{"a" 1}`: 5, `{"a":}`: 5, `{,}`: 1, `{"a":1,}`: 7,
		`{"a":01}`: 6, `{"a":1.}`: 7, `{"a":.5}`: 5, `{"a":1e}`: 7, `{"a":-}`: 6, `{"a":+1}`: 5, `{"a":1.5.}`: 8,
		`{"a":tru}`: 8, `{"a":nul1}`: 8, `{"a":True}`: 5, `{1:2}`: 1, `{"a":'b'}`: 5,
		"{\"a\":\"\x01\"}": 6, "{\"a\":\"\\x\"}": 7, "{\"a\":\"\\u12G4\"}": 10,
		"{\"a\":\"\xC0\xAF\"}": 6, "{\"a\":\"\xE0\x80\x80\"}": 7, "{\"a\":\"\xED\xA0\x80\"}": 7, // overlong, surrogate
		"{\"a\":\"\xF4\x90\x80\x80\"}": 7, "{\"a\":\"\xFF\"}": 6, "{\"a\":\"\xC3\"}": 7,
		`{"a":"\ud800"}`: 12, `{"a":"\udc00"}`: 9, `{"a":"\ud800\u0041"}`: 14, `{"a":"\ud800\n"}`: 13, // surrogate halves alone
	} {
		if n, ok := run(text); n != at || ok {
			t.Errorf("%q: refused at byte %d (complete %v), want %d", text, n, ok, at)
		}
	}
	// Whitespace runs and nesting are bounded.
	for text, at := range map[string]int{
		"   {}": 2, "{}   ": 4, "{       }": 7, "{\n\n}": 2, "{\n \n}": 3, "{\r }": 2, "{\r\r": 2, "{}\r": 3, `{"a":[` + strings.Repeat(" ", 11) + "]}": 6 + 10,
		"{" + strings.Repeat("[", 0) + `"a":` + strings.Repeat(`{"a":`, 20) + strings.Repeat(" ", maxWhitespace+1): 5 + 5*20 + maxWhitespace,
	} {
		if n, ok := run(text); n != at || ok {
			t.Errorf("%q: refused at byte %d (complete %v), want %d", text, n, ok, at)
		}
	}
	if n, _ := run("{\"a\":" + strings.Repeat("[", maxDepth)); n != 5+maxDepth-1 {
		t.Errorf("nesting: refused at %d, want %d", n, 5+maxDepth-1)
	}
	deep := "{\"a\":" + strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1) + "}"
	if n, ok := run(deep); n != len(deep) || !ok {
		t.Errorf("nesting %d deep: took %d of %d", maxDepth, n, len(deep))
	}
}

// TestJSONStateMatchesEncodingJSON holds the recognizer to encoding/json
// on random texts: valid objects and their mutations (a byte dropped,
// repeated, swapped or replaced), over an alphabet that reaches every
// rule. A text the recognizer takes whole and calls complete must be
// valid JSON with an object at the top; a valid object within the limits
// (and UTF-8) must be taken whole and complete.
func TestJSONStateMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const alphabet = "{}[]\":, \n\r0123456789.eE+-truefalsnl\\u\"abé\x01\xff"
	for i := range 30000 {
		text := randomObject(r, 3)
		if i%2 == 1 {
			b := []byte(text)
			for range 1 + r.IntN(3) {
				p := r.IntN(len(b))
				switch r.IntN(4) {
				case 0:
					b = append(b[:p], b[p+1:]...)
				case 1:
					b = append(b[:p+1], b[p:]...)
				case 2:
					q := r.IntN(len(b))
					b[p], b[q] = b[q], b[p]
				default:
					b[p] = alphabet[r.IntN(len(alphabet))]
				}
				if len(b) == 0 {
					b = []byte{'{'}
				}
			}
			text = string(b)
		}
		n, complete := run(text)
		whole := n == len(text) && complete
		trimmed := bytes.TrimLeft([]byte(text), " \t\r\n")
		// encoding/json lets invalid UTF-8 through (it reads it as U+FFFD);
		// JSON text is UTF-8, so the recognizer does not.
		want := json.Valid([]byte(text)) && utf8.ValidString(text) && len(trimmed) > 0 && trimmed[0] == '{' && withinLimits(text)
		if whole != want {
			t.Fatalf("%q: recognizer took %d bytes, complete %v; encoding/json valid object %v", text, n, complete, want)
		}
	}
}

// withinLimits reports whether every whitespace run outside strings holds
// at most one newline and wsLimit of its depth bytes, and nesting stays
// within maxDepth.
func withinLimits(text string) bool {
	depth, run, newlines := 0, 0, 0
	inString, escape := false, false
	for i := 0; i < len(text); i++ {
		b := text[i]
		switch {
		case inString:
			switch {
			case escape:
				escape = false
			case b == '\\':
				escape = true
			case b == '"':
				inString = false
			}
			continue
		case b == ' ' || b == '\t' || b == '\n' || b == '\r':
			if b == '\r' && (i+1 == len(text) || text[i+1] != '\n') {
				return false
			}
			run++
			if b == '\n' {
				newlines++
			}
			if newlines > 1 || run > wsLimit(uint8(min(depth, maxDepth))) {
				return false
			}
			continue
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			if depth++; depth > maxDepth {
				return false
			}
		case b == '}' || b == ']':
			depth--
		}
		run, newlines = 0, 0
	}
	return true
}

// randomObject writes a random JSON object nested up to depth deep.
func randomObject(r *rand.Rand, depth int) string {
	var b strings.Builder
	ws := func() {
		if r.IntN(4) == 0 {
			b.WriteString([]string{" ", "\n ", "\t", "\r\n"}[r.IntN(4)])
		}
	}
	var value func(d int)
	str := func() {
		b.WriteByte('"')
		for range r.IntN(4) {
			b.WriteString([]string{"a", "é", `\"`, `\n`, `\u00e9`, "😀", " "}[r.IntN(7)])
		}
		b.WriteByte('"')
	}
	object := func(d int) {
		b.WriteByte('{')
		ws()
		for i := range r.IntN(3) {
			if i > 0 {
				b.WriteByte(',')
				ws()
			}
			str()
			ws()
			b.WriteByte(':')
			ws()
			value(d - 1)
			ws()
		}
		b.WriteByte('}')
	}
	value = func(d int) {
		switch k := r.IntN(8); {
		case k == 0 && d > 0:
			object(d)
		case k == 1 && d > 0:
			b.WriteByte('[')
			for i := range r.IntN(3) {
				if i > 0 {
					b.WriteString(", ")
				}
				value(d - 1)
			}
			b.WriteByte(']')
		case k == 2:
			str()
		case k == 3:
			b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
		default:
			b.WriteString([]string{"0", "-1", "12.5", "3e7", "-0.25E-3", "42"}[r.IntN(6)])
		}
	}
	ws()
	object(depth)
	ws()
	return b.String()
}
