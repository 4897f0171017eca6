package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// The hand-written matchers must find exactly what the regexes find.
var handPatterns = map[string]string{
	"gpt2":   patternGPT2,
	"llama3": patternLlama3,
	"qwen2":  patternQwen2,
}

// patternAlphabet mixes the character classes the patterns distinguish,
// including whitespace that only some regex engines count as \s (U+0085 is
// White_Space, U+FEFF and U+200B are not) and bytes that are not UTF-8.
var patternAlphabet = []string{
	"a", "Z", "é", "ß", "я", "中", "ア", "한", "ـ", "\u0301", "s", "S", "t", "T", "r", "R", "e", "E", "v", "V", "m", "M", "l", "L", "d", "D",
	"0", "7", "٣", "½", "Ⅻ", "𝟏", " ", " ", " ", "\t", "\n", "\r", "\v", "\f", "\u00a0", "\u0085", "\u2028", "\u3000", "\ufeff", "\u200b",
	"'", "'", "’", ".", ",", "!", "?", "-", "_", "(", ")", "<", ">", "/", "\\", "\"", "$", "😀", "👨‍👩‍👧", "\x80", "\xff", "\xe4\xb8",
}

func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(patternAlphabet[r.IntN(len(patternAlphabet))])
	}
	return b.String()
}

func TestHandPatternsMatchRegexp2(t *testing.T) {
	corpus := loadCorpus(t)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		corpus = append(corpus, randomText(r, 1+r.IntN(24)))
	}
	for name, expr := range handPatterns {
		hand, err := compilePattern(expr, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := hand.(regexpMatcher); ok {
			t.Fatalf("%s: no hand-written matcher", name)
		}
		re, err := compilePattern(expr, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range corpus {
			got, want := hand.appendMatches(nil, s), re.appendMatches(nil, s)
			if !slices.Equal(got, want) {
				t.Errorf("%s on %q:\n\thand    %v\n\tregexp2 %v", name, s, got, want)
			}
		}
	}
}

func FuzzHandPatterns(f *testing.F) {
	for _, s := range []string{"Hello, world!", "I'M  here\r\n\n  x", "123456 abc'DEF", "\u00a0\u0085 x"} {
		f.Add(s)
	}
	res := map[string]*regexp2.Regexp{}
	for name, expr := range handPatterns {
		res[name] = regexp2.MustCompile(expr, regexp2.None)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, expr := range handPatterns {
			hand, _ := compilePattern(expr, false)
			got, want := hand.appendMatches(nil, s), (regexpMatcher{res[name]}).appendMatches(nil, s)
			if !slices.Equal(got, want) {
				t.Errorf("%s on %q: hand %v, regexp2 %v", name, s, got, want)
			}
		}
	})
}
