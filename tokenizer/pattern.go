package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// matcher finds the pattern of a Split pre-tokenizer in text.
type matcher interface {
	// appendMatches appends the byte offsets [start, end) of the successive
	// leftmost, non-overlapping, non-empty matches in s to dst.
	appendMatches(dst [][2]int, s string) [][2]int
}

// The split patterns of the byte-level BPE families in use. Split
// pre-tokenizers with exactly these patterns run on hand-written matchers
// (pretokenizer_test.go checks them against regexp2 on the corpus and on
// random text); any other pattern runs on regexp2.
const (
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// compilePattern returns a matcher for a Split regex. When forceRegexp2 is
// set the hand-written matchers are bypassed (for tests).
func compilePattern(expr string, forceRegexp2 bool) (matcher, error) {
	if !forceRegexp2 {
		switch expr {
		case patternGPT2:
			return gpt2Matcher{}, nil
		case patternLlama3:
			return llama3Matcher{maxDigits: 3}, nil
		case patternQwen2:
			return llama3Matcher{maxDigits: 1}, nil
		}
	}
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile split regex %q: %w", expr, err)
	}
	return regexpMatcher{re}, nil
}

// Character classes, as Oniguruma (Hugging Face tokenizers) defines them:
// \p{L} letters, \p{N} numbers, \s the Unicode White_Space property (which is
// exactly unicode.IsSpace).
const (
	clsL = 1 << iota
	clsN
	clsS
)

var asciiClass = func() (t [128]uint8) {
	for c := 0; c < 128; c++ {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			t[c] = clsL
		case c >= '0' && c <= '9':
			t[c] = clsN
		case c == ' ', c >= '\t' && c <= '\r':
			t[c] = clsS
		}
	}
	return t
}()

func runeClass(r rune) uint8 {
	if r < 128 {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return clsL
	case unicode.IsNumber(r):
		return clsN
	case unicode.IsSpace(r):
		return clsS
	}
	return 0
}

// next decodes the rune at s[i:], with its class and size; size is 0 at the
// end of s.
func next(s string, i int) (r rune, cls uint8, size int) {
	if i >= len(s) {
		return 0, 0, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), asciiClass[c], 1
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	return r, runeClass(r), size
}

// runEnd returns the end of the run of runes of class cls starting at i.
func runEnd(s string, i int, cls uint8) int {
	for {
		_, c, n := next(s, i)
		if n == 0 || c&cls == 0 {
			return i
		}
		i += n
	}
}

// otherEnd returns the end of the run of runes in [^\s\p{L}\p{N}] at i.
func otherEnd(s string, i int) int {
	for {
		_, c, n := next(s, i)
		if n == 0 || c != 0 {
			return i
		}
		i += n
	}
}

// contraction returns the end of 's 't 're 've 'm 'll 'd at s[i:] (which
// starts with the apostrophe), or -1. fold makes the letters match in either
// ASCII case.
func contraction(s string, i int, fold bool) int {
	lower := func(j int) byte {
		if j >= len(s) {
			return 0
		}
		c := s[j]
		if fold && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch lower(i + 1) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return i + 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return i + 3
		}
	}
	return -1
}

// spaceEnd matches \s+(?!\S)|\s+ at i, where a run of whitespace ending at e
// starts: the run less its last rune when a non-space follows and that
// leaves something, else the whole run.
func spaceEnd(s string, i, e int) int {
	if e < len(s) {
		_, n := utf8.DecodeLastRuneInString(s[i:e])
		if e-n > i {
			return e - n
		}
	}
	return e
}

// gpt2Matcher matches patternGPT2.
type gpt2Matcher struct{}

func (gpt2Matcher) matchAt(s string, i int) int {
	r, c, n := next(s, i)
	if r == '\'' {
		if e := contraction(s, i, false); e > 0 {
			return e
		}
	}
	j := i // start of the class run, after an optional leading space
	if r == ' ' {
		if _, c2, n2 := next(s, i+n); n2 > 0 && c2&clsS == 0 {
			j, c = i+n, c2
		}
	}
	switch {
	case c == clsL, c == clsN:
		return runEnd(s, j, c)
	case c == 0:
		return otherEnd(s, j)
	}
	return spaceEnd(s, i, runEnd(s, i, clsS))
}

func (m gpt2Matcher) appendMatches(dst [][2]int, s string) [][2]int {
	return appendMatchesAt(dst, s, m.matchAt)
}

// llama3Matcher matches patternLlama3 (maxDigits 3) and patternQwen2
// (maxDigits 1).
type llama3Matcher struct{ maxDigits int }

func (m llama3Matcher) matchAt(s string, i int) int {
	r, c, n := next(s, i)
	if r == '\'' {
		if e := contraction(s, i, true); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsL {
		return runEnd(s, i+n, clsL)
	}
	if r != '\r' && r != '\n' && c != clsN {
		if _, c2, n2 := next(s, i+n); c2 == clsL {
			return runEnd(s, i+n+n2, clsL)
		}
	}
	// \p{N}{1,maxDigits}
	if c == clsN {
		j := i + n
		for k := 1; k < m.maxDigits; k++ {
			_, c2, n2 := next(s, j)
			if c2 != clsN {
				break
			}
			j += n2
		}
		return j
	}
	// ' '?[^\s\p{L}\p{N}]+[\r\n]*
	j := i
	if r == ' ' {
		j = i + n
	}
	if _, c2, n2 := next(s, j); n2 > 0 && c2 == 0 {
		j = otherEnd(s, j)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	if c != clsS {
		return -1
	}
	// \s*[\r\n]+ : the whitespace run up to its last line break.
	e, lastBreak := i, -1
	for {
		r2, c2, n2 := next(s, e)
		if n2 == 0 || c2 != clsS {
			break
		}
		e += n2
		if r2 == '\r' || r2 == '\n' {
			lastBreak = e
		}
	}
	if lastBreak > 0 {
		return lastBreak
	}
	return spaceEnd(s, i, e)
}

func (m llama3Matcher) appendMatches(dst [][2]int, s string) [][2]int {
	return appendMatchesAt(dst, s, m.matchAt)
}

// appendMatchesAt scans s with a function that returns the end of the match
// starting at i, or a value <= i when none starts there.
func appendMatchesAt(dst [][2]int, s string, matchAt func(string, int) int) [][2]int {
	for i := 0; i < len(s); {
		if e := matchAt(s, i); e > i {
			dst = append(dst, [2]int{i, e})
			i = e
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
	}
	return dst
}

// regexpMatcher runs any other pattern on regexp2 (backtracking, with
// lookaround), which works on runes.
type regexpMatcher struct{ re *regexp2.Regexp }

func (m regexpMatcher) appendMatches(dst [][2]int, s string) [][2]int {
	runes := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1) // byte offset of each rune, and of the end
	for i, r := range s {
		runes = append(runes, r)
		offs = append(offs, i)
	}
	offs = append(offs, len(s))
	match, err := m.re.FindRunesMatch(runes)
	for err == nil && match != nil {
		if match.Length > 0 {
			dst = append(dst, [2]int{offs[match.Index], offs[match.Index+match.Length]})
		}
		match, err = m.re.FindNextMatch(match)
	}
	return dst
}

// stringMatcher matches a literal string.
type stringMatcher struct{ lit string }

func (m stringMatcher) appendMatches(dst [][2]int, s string) [][2]int {
	if m.lit == "" {
		return dst
	}
	for i := 0; ; {
		k := strings.Index(s[i:], m.lit)
		if k < 0 {
			return dst
		}
		dst = append(dst, [2]int{i + k, i + k + len(m.lit)})
		i += k + len(m.lit)
	}
}

// numericMatcher matches numeric runes (Rust's char::is_numeric, \p{N}):
// each one alone, or whole runs.
type numericMatcher struct{ individual bool }

func (m numericMatcher) appendMatches(dst [][2]int, s string) [][2]int {
	for i := 0; i < len(s); {
		_, c, n := next(s, i)
		if c != clsN {
			i += n
			continue
		}
		e := i + n
		if !m.individual {
			e = runEnd(s, i, clsN)
		}
		dst = append(dst, [2]int{i, e})
		i = e
	}
	return dst
}
