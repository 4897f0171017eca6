package structured

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// testPieces is a vocabulary that splits JSON every way a real one does:
// single bytes, whole words and structures, tokens that run from one
// value into the next, escapes and numbers in parts, and UTF-8 characters
// split across tokens. Ids 0 and 1 are special (1 is the end token).
var testPieces = func() []string {
	p := []string{"<s>", "</s>", ""}
	for _, c := range "{}[]\":, \n\t0123456789.eE+-truefalsnl\\u/abcxyzABF" {
		p = append(p, string(c))
	}
	return append(p, `{"`, `":`, `", "`, `": "`, `"}`, `},`, `]}`, `[{"`, ` {`, "\n  ", `true`, `tr`, `ue`, `null`, `false`,
		`\u`, `00`, `e9`, `\"`, `\n`, `12`, `.5`, `e-`, `0.`, `-1`, `"a":1}`, `}}`, `]]`, `,"`, `[]`, `{}`,
		`\q`, `x\`, `a"b`, `"\`, "é", "\xC3", "\xA9", "😀", "\xF0\x9F", "\x98\x80", "\x80", "日本", "\x01", "   ", strings.Repeat(" ", 70))
}()

func testVocab() *Vocab {
	return NewVocab(testPieces, func(id int) bool { return id < 2 }, []int{1})
}

// allowedByMask runs Mask on zero logits and lists the ids left finite.
func allowedByMask(m *Matcher, vocab int) []int {
	logits := make([]float32, vocab)
	m.Mask(logits)
	var ids []int
	for id, l := range logits {
		if !math.IsInf(float64(l), -1) {
			ids = append(ids, id)
		}
	}
	return ids
}

// allowedByHand checks every token on its own: its bytes one by one from
// the matcher's state; the end token once the object is complete, or when
// nothing else is allowed.
func allowedByHand(m *Matcher, eos int) []int {
	var ids []int
	for id, p := range m.v.bytes {
		if p != nil && m.accepts(p) {
			ids = append(ids, id)
		}
	}
	if m.Complete() || len(ids) == 0 {
		ids = append(ids, eos)
		slices.Sort(ids)
	}
	return ids
}

// TestMatcherWalks generates with random choices among the allowed tokens
// (after 60 steps preferring tokens that close what is open, so that every
// walk ends): at every step the mask equals checking each token by hand
// (the trie search and the plain-string shortcut lose nothing and add
// nothing), the end token is allowed only once the object is complete,
// and every walk ends in one JSON object.
func TestMatcherWalks(t *testing.T) {
	v := testVocab()
	r := rand.New(rand.NewPCG(1, 2))
	for walk := range 400 {
		text := randomWalk(t, v, testPieces, JSONObject(), r, 60)
		dec := json.NewDecoder(strings.NewReader(text))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil || dec.More() {
			t.Fatalf("walk %d generated %q: %v", walk, text, err)
		}
	}
}

// randomWalk generates from f with random choices among the tokens the
// mask allows (pieces[1] is the end token), after the first free steps
// preferring tokens that close what is open, so that every walk ends, and
// checks at every step that the mask equals checking each token by hand.
// It returns the text.
func randomWalk(t *testing.T, v *Vocab, pieces []string, f *Format, r *rand.Rand, free int) string {
	t.Helper()
	closing := []string{"</s>", `"`, "}", "]", ":", ",", "0", ")"}
	m := v.Matcher(f)
	var text strings.Builder
	for step := 0; ; step++ {
		if step > 3000 {
			t.Fatalf("the walk did not end: %q", text.String())
		}
		ids := allowedByMask(m, len(pieces))
		if want := allowedByHand(m, 1); !slices.Equal(ids, want) {
			t.Fatalf("after %q: mask allows %v, by hand %v", text.String(), ids, want)
		}
		tok := ids[r.IntN(len(ids))]
		if step > free {
			for _, c := range closing {
				if i := slices.Index(pieces, c); slices.Contains(ids, i) {
					tok = i
					break
				}
			}
		}
		if tok == 1 {
			return text.String()
		}
		m.Accept(tok)
		text.WriteString(pieces[tok])
	}
}

// TestMatcherMask: special and empty tokens are never allowed, the end
// token only at the end, ids past the tokenizer's vocabulary (a model's
// padding) never; when nothing in the vocabulary can continue, the end
// token is.
func TestMatcherMask(t *testing.T) {
	v := testVocab()
	m := v.Matcher(JSONObject())
	logits := make([]float32, len(testPieces)+3)
	m.Mask(logits)
	start := []string{"{", " {", "{}", `{"`, " ", "\n", "\t"} // runs of two bytes at the top level
	for id, l := range logits {
		allowed := !math.IsInf(float64(l), -1)
		want := id < len(testPieces) && slices.Contains(start, testPieces[id])
		if allowed != want {
			t.Errorf("at the start, token %d %q: allowed %v, want %v", id, testPieces[id%len(testPieces)], allowed, want)
		}
	}
	for _, p := range []string{"{}"} {
		m.Accept(slices.Index(testPieces, p))
	}
	if !m.Complete() || !slices.Equal(allowedByMask(m, len(testPieces)), allowedByHand(m, 1)) || !slices.Contains(allowedByMask(m, len(testPieces)), 1) {
		t.Errorf("after {}: complete %v, allowed %v", m.Complete(), allowedByMask(m, len(testPieces)))
	}
	// A vocabulary without the closing quote strands a string: the end
	// token is the way out.
	noQuote := NewVocab([]string{"<s>", "</s>", "{", "a"}, func(id int) bool { return id < 2 }, []int{1})
	m = noQuote.Matcher(JSONObject())
	m.Accept(2)
	if got := allowedByMask(m, 4); !slices.Equal(got, []int{1}) {
		t.Errorf("after { with no quote token: allowed %v, want the end token alone", got)
	}
	// A token the mask did not allow leaves the state as it was.
	m = v.Matcher(JSONObject())
	m.Accept(slices.Index(testPieces, "}"))
	if got := allowedByMask(m, len(testPieces)); !slices.Equal(got, allowedByMask(v.Matcher(JSONObject()), len(testPieces))) {
		t.Errorf("a refused token moved the state: %v", got)
	}
}
