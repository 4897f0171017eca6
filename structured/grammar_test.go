package structured

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// jsonGBNF is a JSON grammar in the style of llama.cpp's grammars/json.gbnf:
// multi-line rules, nested groups over lines, an empty alternative,
// negated classes with escapes, and counted repetitions.
const jsonGBNF = `# JSON, one object at the top
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

ws ::= | " " | "\n" [ \t]{0,20}
`

// regularGrammars are grammars with a Go regexp for the same language.
var regularGrammars = []struct{ grammar, regex string }{
	{`root ::= [a-c]+ "x"?`, `[a-c]+x?`},
	{`root ::= [0-9]{3} "-" [0-9]{2,4}`, `[0-9]{3}-[0-9]{2,4}`},
	{`root ::= ("ab" | "a") "c"?`, `(ab|a)c?`},
	{`root ::= [^a]{0,2}`, `[^a]{0,2}`},
	{`root ::= "é" | "日本"`, `é|日本`},
	{`root ::= . "b"`, `(?s).b`},
	{"root ::= (x | y)* \"abb\"\nx ::= \"a\"\ny ::= \"b\"", `(a|b)*abb`},
	{`root ::= [\U0001F600-\U0001F64F]+`, `[\x{1F600}-\x{1F64F}]+`},
	{"root ::= \"a\"{2,} b # a comment\n\nb ::= \"b\"\n  | \"c\"  # a line starting with | goes on\n", `a{2,}(b|c)`},
	{`root ::= [a-z] ([a-z0-9_]){,5}`, `[a-z][a-z0-9_]{0,5}`},
	{`root ::= "" | "a" root`, `a*`},
	{`root ::= [\]\-\\^] "\x41\u00e9\"\n"`, `[\]\-\\^]Aé"\n`},
	{`root ::= ("ab"){1,3} [^\n]`, `(ab){1,3}[^\n]`},
	// Characters past ASCII taken all alike (a string's body) or not;
	// each ends on a character randomWalk closes with.
	{`root ::= [^"]* "\""`, `[^"]*"`},
	{`root ::= [^"é]* "\""`, `[^"é]*"`},
	{`root ::= [\u0080-\U0010FFFF]+ "}"`, `[\x{80}-\x{10FFFF}]+\}`},
	{`root ::= ([^"] | "日" "x")* "\""`, `([^"]|日x)*"`},
	{`root ::= [^a]* "\"" | [\u0080-\U0010FFFF]* "}"`, `[^a]*"|[\x{80}-\x{10FFFF}]*\}`},
}

// derives is a recognizer independent of grammarMatch over the compiled
// elements: the positions each rule can end at from position i, by
// memoized recursion (no left recursion, so it ends).
type derives struct {
	g    *grammar
	text []rune
	memo map[[2]int][]int
}

func (d *derives) rule(r int32, i int) []int {
	k := [2]int{int(r), i}
	if ends, ok := d.memo[k]; ok {
		return ends
	}
	d.memo[k] = nil
	var ends []int
	for _, a := range d.g.alts[r] {
		ends = append(ends, d.seq(a, i)...)
	}
	slices.Sort(ends)
	ends = slices.Compact(ends)
	d.memo[k] = ends
	return ends
}

func (d *derives) seq(pos int32, i int) []int {
	switch e := &d.g.elems[pos]; e.kind {
	case gEnd:
		return []int{i}
	case gChars:
		if i < len(d.text) && e.matches(d.text[i]) {
			return d.seq(pos+1, i+1)
		}
		return nil
	default:
		var ends []int
		for _, j := range d.rule(e.rule, i) {
			ends = append(ends, d.seq(pos+1, j)...)
		}
		return ends
	}
}

func (g *grammar) derivesText(s string) bool {
	d := &derives{g: g, text: []rune(s), memo: map[[2]int][]int{}}
	return slices.Contains(d.rule(g.root, 0), len(d.text))
}

// grammarAccepts runs s through a fresh recognizer: whether it is
// taken whole.
func grammarAccepts(g *grammar, s string) bool {
	m := newGrammarMatch(g)
	st, ok := m.run([]byte(s))
	return ok && st.complete()
}

// TestGrammarMatchesRegexp compares the recognizer, and the independent
// one, with Go's regexp on grammars whose language is regular, over
// random strings of the patterns' alphabet.
func TestGrammarMatchesRegexp(t *testing.T) {
	alphabet := []rune("abcxyzAB0123456789-_ \n\\]^\"éÉ日本😀😃")
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range regularGrammars {
		f, err := Grammar(c.grammar)
		if err != nil {
			t.Fatalf("%q: %v", c.grammar, err)
		}
		oracle := regexp.MustCompile(`^(?:` + c.regex + `)$`)
		for n := range 4000 {
			var b strings.Builder
			for range rng.IntN(8) {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			s := b.String()
			if n%4 == 0 { // strings of the language, so accepting is tested too
				s = walkGrammar(f.grammar, rng)
			}
			want := oracle.MatchString(s)
			if got := grammarAccepts(f.grammar, s); got != want {
				t.Fatalf("%q on %q: recognizer %v, regexp %v", c.grammar, s, got, want)
			}
			if got := f.grammar.derivesText(s); got != want {
				t.Fatalf("%q on %q: derivation %v, regexp %v", c.grammar, s, got, want)
			}
		}
	}
}

// walkGrammar draws a random text of g's language by expanding rules at
// random (shorter alternatives once the text is long).
func walkGrammar(g *grammar, rng *rand.Rand) string {
	var b strings.Builder
	var expand func(r int32, depth int)
	expand = func(r int32, depth int) {
		alts := g.alts[r]
		a := alts[rng.IntN(len(alts))]
		if depth > 8 || b.Len() > 40 {
			a = slices.MinFunc(alts, func(x, y int32) int { return g.minLen(x) - g.minLen(y) })
		}
		for pos := a; g.elems[pos].kind != gEnd; pos++ {
			e := &g.elems[pos]
			if e.kind == gRef {
				expand(e.rule, depth+1)
				continue
			}
			for try := 0; ; try++ {
				lo, hi := rune(0), rune(0x10FFFF)
				if len(e.ranges) > 0 && !e.neg {
					i := 2 * rng.IntN(len(e.ranges)/2)
					lo, hi = e.ranges[i], e.ranges[i+1]
				}
				c := lo + rune(rng.IntN(int(min(hi-lo+1, 300))))
				if e.matches(c) && (c < 0xD800 || c > 0xDFFF) || try > 10000 { // (a broken matches: the checks will say)
					b.WriteRune(c)
					break
				}
			}
		}
	}
	expand(g.root, 0)
	return b.String()
}

// minLen is the fewest characters the alternative from pos derives (a
// bound of 50 through rules, enough to steer walks to an end).
func (g *grammar) minLen(pos int32) int {
	n := 0
	for ; g.elems[pos].kind != gEnd; pos++ {
		if g.elems[pos].kind == gChars {
			n++
		} else {
			n += 50
		}
	}
	return n
}

// TestGrammarBalanced: a language no regexp has, against a counter.
func TestGrammarBalanced(t *testing.T) {
	f, err := Grammar(`root ::= "" | "(" root ")" root`)
	if err != nil {
		t.Fatal(err)
	}
	balanced := func(s string) bool {
		depth := 0
		for _, c := range s {
			if c == '(' {
				depth++
			} else if c == ')' {
				if depth--; depth < 0 {
					return false
				}
			} else {
				return false
			}
		}
		return depth == 0
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteByte("()x"[rng.IntN(3)%2+rng.IntN(50)/49])
		}
		s := b.String()
		if got, want := grammarAccepts(f.grammar, s), balanced(s); got != want {
			t.Fatalf("%q: recognizer %v, counter %v", s, got, want)
		}
	}
	// Deep nesting keeps one stack per depth, not one per path.
	deep := strings.Repeat("(", 500) + strings.Repeat(")", 500)
	if !grammarAccepts(f.grammar, deep) || grammarAccepts(f.grammar, deep+")") {
		t.Fatal("500 levels of nesting")
	}
}

// TestGrammarWalks generates through the mask with the test vocabulary
// (tokens that split characters, escapes and keywords): at every step the
// mask equals checking each token by hand, and every text is in the
// grammar's language: JSON that encoding/json reads, or the regexp's.
func TestGrammarWalks(t *testing.T) {
	pieces := append(slices.Clone(testPieces), "ab", "abb", "日", "本", "é\"", "x\n", "ax", "(", ")", "()")
	v := NewVocab(pieces, func(id int) bool { return id < 2 }, []int{1})
	rng := rand.New(rand.NewPCG(9, 10))
	f, err := Grammar(jsonGBNF)
	if err != nil {
		t.Fatal(err)
	}
	for walk := range 200 {
		text := randomWalk(t, v, pieces, f, rng, 40)
		dec := json.NewDecoder(strings.NewReader(text))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil || dec.More() {
			t.Fatalf("walk %d generated %q: %v", walk, text, err)
		}
	}
	for _, c := range append(regularGrammars, struct{ grammar, regex string }{`root ::= ("é" | "日本" | "😀")+ "\\"?`, `(é|日本|😀)+\\?`}) {
		f, err := Grammar(c.grammar)
		if err != nil {
			t.Fatal(err)
		}
		oracle := regexp.MustCompile(`^(?:` + c.regex + `)$`)
		for walk := range 60 {
			if text := randomWalk(t, v, pieces, f, rng, 20); !oracle.MatchString(text) {
				t.Fatalf("%q walk %d generated %q", c.grammar, walk, text)
			}
		}
	}
	f, err = Grammar(`root ::= "" | "(" root ")" root`)
	if err != nil {
		t.Fatal(err)
	}
	for range 60 {
		if text := randomWalk(t, v, pieces, f, rng, 20); !grammarAccepts(f.grammar, text) {
			t.Fatalf("balanced walk generated %q", text)
		}
	}
}

// TestGrammarMaskCache: a state's mask is searched once, then copied; the
// cache stops at maxGrammarMasks.
func TestGrammarMaskCache(t *testing.T) {
	v := testVocab()
	f, err := Grammar(`root ::= [a-c]+`)
	if err != nil {
		t.Fatal(err)
	}
	m := v.Matcher(f)
	first := allowedByMask(m, len(testPieces))
	m.Accept(slices.Index(testPieces, "a"))
	second := allowedByMask(m, len(testPieces))
	m.Accept(slices.Index(testPieces, "b"))
	third := allowedByMask(m, len(testPieces))
	if !slices.Equal(second, third) || slices.Contains(first, 1) || !slices.Contains(second, 1) {
		t.Fatalf("masks %v, %v, %v", first, second, third)
	}
	if m.gm.g.masks != 2 || len(m.gm.g.sets) != 2 {
		t.Fatalf("%d masks cached over %d states, want 2 and 2 ([a-c]+ loops in one)", m.gm.g.masks, len(m.gm.g.sets))
	}
}

func TestGrammarErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{``, "no rule named root"},
		{`start ::= "a"`, "no rule named root"},
		{`root ::= foo`, "foo is used but not defined"},
		{`root ::= "a`, "unclosed string"},
		{`root ::= [a-`, "unclosed character class"},
		{`root ::= "\q"`, `unknown escape \q`},
		{`root = "a"`, "expected ::="},
		{`root ::= "a"{3,2}`, "want 0 ≤ m ≤ n"},
		{`root ::= "a"{2000}`, "want 0 ≤ m ≤ n"},
		{`root ::= "a"{x}`, "not a number"},
		{`root ::= *`, "repeats nothing"},
		{`root ::= ("a"`, "expected )"},
		{"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
		{`root ::= [z-a]`, "backwards"},
		{`root ::= <[100]>`, "token references"},
		{`root ::= root "a" | "b"`, "rule root is left-recursive"},
		{"root ::= a\na ::= b \"x\"\nb ::= root | \"y\"", "left-recursive"},
		{"root ::= e root \"x\" | \"y\"\ne ::= \"\"", "left-recursive"},
		{`root ::= "a" )`, "unexpected"},
		{"root ::= \"a\nb\"", "newline inside"},
		{"root ::= " + strings.Repeat(`"a"{1000} `, 70), "copy more than"},
	} {
		_, err := Grammar(c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one saying %q", c.src, err, c.want)
		}
	}
}

// FuzzGrammar: any source compiles or is refused without a panic, and a
// compiled grammar's recognizer agrees with the independent derivation.
func FuzzGrammar(f *testing.F) {
	for _, c := range regularGrammars {
		f.Add(c.grammar, "abc")
	}
	f.Add(jsonGBNF, `{"a": [1, true]}`)
	f.Add(`root ::= "" | "(" root ")" root`, "(()())")
	f.Fuzz(func(t *testing.T, src, text string) {
		fm, err := Grammar(src)
		if err != nil || len(text) > 64 || !utf8.ValidString(text) {
			return
		}
		if got, want := grammarAccepts(fm.grammar, text), fm.grammar.derivesText(text); got != want {
			t.Fatalf("%q on %q: recognizer %v, derivation %v", src, text, got, want)
		}
	})
}

// TestUTF8Dec: the characters a begun sequence may still spell respect
// the range of the byte that comes next (no overlong forms, surrogates or
// characters past U+10FFFF), and invalid bytes are refused.
func TestUTF8Dec(t *testing.T) {
	for _, c := range []struct {
		prefix string
		lo, hi rune
	}{
		{"\xC3", 0xC0, 0xFF},
		{"\xE0", 0x800, 0xFFF},
		{"\xED", 0xD000, 0xD7FF},
		{"\xE6\x97", 0x65C0, 0x65FF},
		{"\xF0", 0x10000, 0x3FFFF},
		{"\xF0\x9F", 0x1F000, 0x1FFFF},
		{"\xF4", 0x100000, 0x10FFFF},
	} {
		var d utf8Dec
		for i := 0; i < len(c.prefix); i++ {
			if !d.feed(c.prefix[i]) {
				t.Fatalf("%q refused", c.prefix)
			}
		}
		if lo, hi := d.span(); lo != c.lo || hi != c.hi {
			t.Errorf("%q: %#x..%#x, want %#x..%#x", c.prefix, lo, hi, c.lo, c.hi)
		}
	}
	for _, bad := range []string{"\x80", "\xC0", "\xC1", "\xF5", "\xE0\x80", "\xED\xA0", "\xF0\x80", "\xF4\x90", "\xC3\xC3"} {
		var d utf8Dec
		ok := true
		for i := 0; i < len(bad) && ok; i++ {
			ok = d.feed(bad[i])
		}
		if ok {
			t.Errorf("%q accepted", bad)
		}
	}
	// A token that begins a character only the wrong side of the
	// grammar's range can finish is masked.
	v := NewVocab([]string{"<s>", "</s>", "\xE0", "\xA0\x80", "\xC4", "\x80"}, func(id int) bool { return id < 2 }, []int{1})
	f, err := Grammar(`root ::= [\u0100-\u07FF]`)
	if err != nil {
		t.Fatal(err)
	}
	if ids := allowedByMask(v.Matcher(f), 6); !slices.Equal(ids, []int{4}) {
		t.Fatalf("allowed %v, want only \\xC4 (U+0100..U+013F)", ids)
	}
}

// TestGrammarCache: a source compiled again shares the grammar (and its
// masks) until grammarCacheSize others have been compiled since.
func TestGrammarCache(t *testing.T) {
	a, err := Grammar(`root ::= "cached"`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Grammar(`root ::= "cached"`)
	if a.grammar != b.grammar {
		t.Fatal("the same source compiled twice")
	}
	for i := range grammarCacheSize {
		if _, err := Grammar(fmt.Sprintf(`root ::= "%d"`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if c, _ := Grammar(`root ::= "cached"`); c.grammar == a.grammar || !grammarAccepts(c.grammar, "cached") {
		t.Fatal("the oldest grammar was not dropped")
	}
}

// TestGrammarStyles: grammars written as llama.cpp's grammar files are
// (comments and blank lines inside a multi-line group, a class led by
// '-', escapes of control and separator characters) compile and
// recognize their language.
func TestGrammarStyles(t *testing.T) {
	for _, c := range []struct {
		src string
		in  []string
		out []string
	}{
		{"root  ::= (expr \"=\" ws term \"\\n\")+\nexpr  ::= term ([-+*/] term)*\nterm  ::= ident | num | \"(\" ws expr \")\" ws\n" +
			"ident ::= [a-z] [a-z0-9_]* ws\nnum   ::= [0-9]+ ws\nws    ::= [ \\t\\n]*\n",
			[]string{"a+b = 12\n", "(x*2)/y =z\n1-2=3\n"}, []string{"a+ = 1\n", "a = b", "A = 1\n"}},
		{"root   ::= (\n    # the first move\n    \"1. \" move \" \" move \"\\n\"\n\n    # then more\n    ([1-9] [0-9]? \". \" move \" \" move \"\\n\")+\n)\nmove ::= [a-h] [1-8]\n",
			[]string{"1. e4 e5\n2. d4 d5\n"}, []string{"1. e4 e5\n", "1. e9 e5\n2. a1 a2\n"}},
		{"root ::= item+\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"",
			[]string{"- a\n- b c\n"}, []string{"- a\u2028b\n", "- \n"}},
	} {
		f, err := Grammar(c.src)
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		for _, s := range c.in {
			if !grammarAccepts(f.grammar, s) || !f.grammar.derivesText(s) {
				t.Errorf("%q refuses %q", c.src, s)
			}
		}
		for _, s := range c.out {
			if grammarAccepts(f.grammar, s) || f.grammar.derivesText(s) {
				t.Errorf("%q accepts %q", c.src, s)
			}
		}
	}
}

// TestGrammarConcurrent: sequences of one grammar mask and accept at the
// same time (the engine samples rows in parallel) over its shared tables;
// run with -race.
func TestGrammarConcurrent(t *testing.T) {
	pieces := append(slices.Clone(testPieces), "ab", "日", "本")
	v := NewVocab(pieces, func(id int) bool { return id < 2 }, []int{1})
	f, err := Grammar(jsonGBNF)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			for range 10 {
				m := v.Matcher(f)
				for step := 0; step < 200; step++ {
					ids := allowedByMask(m, len(pieces))
					tok := ids[rng.IntN(len(ids))]
					if tok == 1 {
						break
					}
					m.Accept(tok)
				}
			}
		})
	}
	wg.Wait()
}
