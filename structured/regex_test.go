package structured

import (
	"math/rand/v2"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// testPatterns reach the pieces of a pattern: classes and their
// negations, repetition counts, alternation, anchors, case folding,
// Unicode classes and multi-byte literals.
var testPatterns = []string{
	`[a-c]+`, `^\d{3}-\d{4}$`, `(ab|a)c?`, `x*y*`, `[^a]{0,2}`, `(?i)hé`, `\p{Greek}+[0-9]?`, `a.b`, `(foo|bar)+baz`,
	`[A-Za-z_][A-Za-z0-9_]{0,5}`, `^$`, `é|日本`, `\s?\w+`, `(a|b)*abb`, `a{2,}b`, `[\x{1F600}-\x{1F64F}]+`,
}

// dfaMatch runs s through the DFA: whether it is accepted whole.
func dfaMatch(r *regex, s string) bool {
	st := int32(0)
	for _, c := range s {
		if st = r.step(st, c); st < 0 {
			return false
		}
	}
	return r.states[st].accept
}

// TestRegexMatchesGo compares the DFA with Go's regexp anchored at both
// ends, on random strings over the patterns' alphabet and on strings a
// random walk of the DFA accepts (which must match).
func TestRegexMatchesGo(t *testing.T) {
	alphabet := []rune("abcxyzfobrABCHÉé0123456789-_ \n日本αβΣ😀😃")
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range testPatterns {
		r, err := compileRegex(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		oracle := regexp.MustCompile(`^(?:` + p + `)$`)
		for range 3000 {
			var b strings.Builder
			for range rng.IntN(8) {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			if s := b.String(); dfaMatch(r, s) != oracle.MatchString(s) {
				t.Fatalf("%s: %q: DFA %v, regexp %v", p, s, dfaMatch(r, s), oracle.MatchString(s))
			}
		}
		for range 200 { // walks of the DFA: every state kept can reach a match
			var b strings.Builder
			st := int32(0)
			for step := 0; ; step++ {
				s := &r.states[st]
				if s.accept && (len(s.next) == 0 || rng.IntN(3) == 0 || step > 40) {
					break
				}
				if len(s.next) == 0 {
					t.Fatalf("%s: state %d after %q is a dead end", p, st, b.String())
				}
				j := rng.IntN(len(s.next))
				c := s.lo[j] + rune(rng.IntN(int(min(s.hi[j]-s.lo[j]+1, 1000))))
				for !utf8.ValidRune(c) {
					c--
				}
				b.WriteRune(c)
				st = s.next[j]
			}
			if !oracle.MatchString(b.String()) {
				t.Fatalf("%s: the DFA accepts %q, regexp does not", p, b.String())
			}
		}
	}
}

func TestRegexErrors(t *testing.T) {
	for _, p := range []string{`(`, `a\b`, `(?m)^a$`, `[a-z]{1000}[0-9]{1000}[a-z]{1000}`, strings.Repeat("a", maxRegexLen+1), `a^b`} {
		if _, err := compileRegex(p); err == nil {
			t.Errorf("%q: no error", p)
		}
	}
}

func TestUTF8Span(t *testing.T) {
	for _, c := range []struct {
		prefix string
		lo, hi rune
	}{
		{"a", 'a', 'a'},
		{"\xC3", 0xC0, 0xFF},
		{"\xE6", 0x6000, 0x6FFF},
		{"\xE6\x97", 0x65C0, 0x65FF},
		{"\xF0\x9F", 0x1F000, 0x1FFFF},
		{"\xF4", 0x100000, utf8.MaxRune},
	} {
		if lo, hi := utf8Span([]byte(c.prefix)); lo != c.lo || hi != c.hi {
			t.Errorf("%q: %#x..%#x, want %#x..%#x", c.prefix, lo, hi, c.lo, c.hi)
		}
	}
}

// TestRegexFormatWalks generates plain text through the mask for guided
// regexes: every text matches whole, and the special tokens never come.
func TestRegexFormatWalks(t *testing.T) {
	pieces := append(slices.Clone(testPieces), "ab", "abb", "-", "日", "本", "é\"", "\\", "x\n")
	v := NewVocab(pieces, func(id int) bool { return id < 2 }, []int{1})
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range []string{`[a-c]+x?`, `\d{3}-\d{2}`, `(a|b)*abb`, `(日本|é")+\\?`, `x\n(true|false)`, `\{"a": [0-9]\}`} {
		f, err := Regex(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		oracle := regexp.MustCompile(`^(?:` + p + `)$`)
		for walk := range 100 {
			if text := randomWalk(t, v, pieces, f, rng, 30); !oracle.MatchString(text) {
				t.Fatalf("%s walk %d generated %q", p, walk, text)
			}
		}
	}
	if _, err := Regex(`(`); err == nil {
		t.Error("Regex(`(`): no error")
	}
}

// FuzzRegex: any pattern compiles or is refused without a panic, and a
// compiled one agrees with Go's regexp anchored at both ends.
func FuzzRegex(f *testing.F) {
	for _, p := range testPatterns {
		f.Add(p, "abc")
	}
	f.Add(`[^\x00-\x{10FFFF}]`, "")
	f.Add(`(?i)Σ+|$^`, "σς")
	f.Fuzz(func(t *testing.T, pattern, text string) {
		r, err := compileRegex(pattern)
		if err != nil || !utf8.ValidString(text) {
			return
		}
		// Anchored on the parsed pattern, not its text: a \Q without \E
		// quotes everything after it, an appended ")$" too.
		re, err := syntax.Parse(pattern, syntax.Perl)
		if err != nil {
			t.Fatalf("%q compiled here, not in regexp: %v", pattern, err)
		}
		anchored := &syntax.Regexp{Op: syntax.OpConcat, Sub: []*syntax.Regexp{{Op: syntax.OpBeginText}, re, {Op: syntax.OpEndText}}}
		oracle, err := regexp.Compile(anchored.String())
		if err != nil {
			t.Fatalf("%q: the anchored pattern %q does not compile: %v", pattern, anchored, err)
		}
		if got, want := dfaMatch(r, text), oracle.MatchString(text); got != want {
			t.Fatalf("%q on %q: DFA %v, regexp %v", pattern, text, got, want)
		}
	})
}
