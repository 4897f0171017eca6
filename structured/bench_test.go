package structured

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/tokenizer"
)

// benchPieces is a synthetic vocabulary of Llama 3's size (128,256):
// words of 1-10 letters, about half with a leading space, and a tenth of
// tokens mixing in digits, punctuation, quotes, brackets, newlines or
// multi-byte characters, the mix a byte-level BPE vocabulary has.
func benchPieces(n int) []string {
	r := rand.New(rand.NewPCG(3, 4))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	extra := []string{"0", "1", "42", ".", ",", ":", `"`, `",`, `":`, "{", "}", "[", "]", "\n", "\n  ", "é", "日", "\\", "\xE2", "\x80", "<", "</", "<tool_call>"}
	pieces := make([]string, n)
	seen := map[string]bool{}
	for i := range pieces {
		for {
			var b strings.Builder
			if r.IntN(2) == 0 {
				b.WriteByte(' ')
			}
			for range 1 + r.IntN(10) {
				b.WriteByte(letters[r.IntN(len(letters))])
			}
			if r.IntN(10) == 0 {
				b.WriteString(extra[r.IntN(len(extra))])
			}
			if p := b.String(); !seen[p] {
				seen[p], pieces[i] = true, p
				break
			}
		}
	}
	return pieces
}

// BenchmarkMask masks a 128,256-token vocabulary in the states a JSON
// generation spends its time in: inside a string (the plain-string
// shortcut plus the other tokens one by one), where a value is due (the
// trie search), after a value, and inside a string with a pattern (no
// shortcut: the trie search, each character through the pattern's DFA),
// and in a tool-call format's free text, its half-typed opening tag, and
// a call.
func BenchmarkMask(b *testing.B) {
	pieces := benchPieces(128256)
	v := NewVocab(pieces, func(int) bool { return false }, []int{0})
	logits := make([]float32, len(pieces))
	pattern, err := JSONSchema([]byte(`{"type": "object", "properties": {"key": {"type": "string", "pattern": "[A-Za-z ]+ [0-9]{1,3}"}}}`))
	if err != nil {
		b.Fatal(err)
	}
	tagged, err := TaggedToolCalls("<tool_call>", "</tool_call>", testTools)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, prefix string
		f            *Format
	}{
		{"string", `{"key": "some text`, JSONObject()}, {"value", `{"key": `, JSONObject()}, {"after", `{"key": 12`, JSONObject()},
		{"pattern", `{"key": "some text`, pattern},           // every token through the trie and the DFA
		{"tagged-free", `Let me check the weather.`, tagged}, // the tokens holding '<' one by one
		{"tagged-open", `Let me check <tool`, tagged},        // every token one by one
		{"tagged-call", `<tool_call>{"name": "get_weather", "arguments": {"city": "Pa`, tagged},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := v.Matcher(c.f)
			for i := 0; i < len(c.prefix); i++ {
				if !m.st.step(c.prefix[i]) {
					b.Fatalf("prefix %q refused at %d", c.prefix, i)
				}
			}
			for b.Loop() {
				m.Mask(logits)
			}
			b.ReportMetric(float64(len(pieces))/(b.Elapsed().Seconds()/float64(b.N))/1e6, "Mtokens/s")
		})
	}
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
			NewVocab(pieces, func(int) bool { return false }, nil)
		}
	})
}

// BenchmarkGrammarMask masks the 128,256-token vocabulary under the JSON
// grammar (jsonGBNF): cold, a state's first mask (the grammar compiled
// again, so the trie search steps each character through the state for
// the first time), and cached, the mask of a state some sequence of the
// grammar reached before (unpacked from its bits).
func BenchmarkGrammarMask(b *testing.B) {
	pieces := benchPieces(128256)
	v := NewVocab(pieces, func(int) bool { return false }, []int{0})
	logits := make([]float32, len(pieces))
	f, err := Grammar(jsonGBNF)
	if err != nil {
		b.Fatal(err)
	}
	matcher := func(f *Format, prefix string) *Matcher {
		m := v.Matcher(f)
		if _, ok := m.gm.run([]byte(prefix)); !ok {
			b.Fatalf("prefix %q refused", prefix)
		}
		m.gm.accept([]byte(prefix))
		return m
	}
	v.subtrees() // once per vocabulary (BenchmarkVocabSubtrees)
	for _, c := range []struct{ name, prefix string }{{"string", `{"key": "some text`}, {"value", `{"key": `}} {
		b.Run(c.name+"/cold", func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++ // a grammar of its own each time, so its tables start empty
				f, err := Grammar(jsonGBNF + fmt.Sprintf("\nunused%d ::= \"x\"", i))
				if err != nil {
					b.Fatal(err)
				}
				matcher(f, c.prefix).Mask(logits)
			}
			b.ReportMetric(float64(len(pieces))/(b.Elapsed().Seconds()/float64(b.N))/1e6, "Mtokens/s")
		})
		b.Run(c.name+"/cached", func(b *testing.B) {
			m := matcher(f, c.prefix)
			m.Mask(logits)
			for b.Loop() {
				m.Mask(logits)
			}
			b.ReportMetric(float64(len(pieces))/(b.Elapsed().Seconds()/float64(b.N))/1e6, "Mtokens/s")
		})
	}
}

// BenchmarkVocabSubtrees is the one-time arrangement of a 128,256-token
// vocabulary's trie for grammar masks (Vocab.subtrees).
func BenchmarkVocabSubtrees(b *testing.B) {
	pieces := benchPieces(128256)
	for b.Loop() {
		b.StopTimer()
		v := NewVocab(pieces, func(int) bool { return false }, []int{0})
		b.StartTimer()
		v.subtrees()
	}
	b.ReportMetric(float64(len(NewVocab(pieces, func(int) bool { return false }, []int{0}).label)), "nodes")
}

// BenchmarkGrammarMaskLlama3 is BenchmarkGrammarMask's cold masks on Llama
// 3's real 128,256-token vocabulary (run tokenizer/testdata/fetch.sh
// first; skipped without it): inside a string, and inside a string
// nested in an array, each state searched for the first time.
func BenchmarkGrammarMaskLlama3(b *testing.B) {
	dir := filepath.Join("..", "tokenizer", "testdata", "npm", "node_modules", "@lenml", "tokenizer-llama3", "models")
	tok, err := tokenizer.Load(dir)
	if err != nil {
		b.Skipf("no Llama 3 tokenizer (run tokenizer/testdata/fetch.sh): %v", err)
	}
	v := TokenizerVocab(tok, []int{0})
	v.subtrees()
	logits := make([]float32, tok.VocabSize())
	for _, c := range []struct{ name, prefix string }{{"string", `{"key": "some text`}, {"nested-string", `{"a": [{"b": "x`}} {
		b.Run(c.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				f, err := Grammar(jsonGBNF + fmt.Sprintf("\nunused%d ::= \"x\"", i))
				if err != nil {
					b.Fatal(err)
				}
				m := v.Matcher(f)
				m.gm.accept([]byte(c.prefix))
				m.Mask(logits)
			}
		})
	}
}
