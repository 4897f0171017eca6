package tokenizer

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

func loadCorpus(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile("testdata/corpus.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus []string
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatal(err)
	}
	return corpus
}

// roundTripCase is a tokenizer under test and what decode(encode(s)) gives
// back for s where the tokenizer is lossy.
type roundTripCase struct {
	name string
	tok  *Tokenizer
	want func(s string) string
}

func roundTripCases(t *testing.T) []roundTripCase {
	stories := loadStories(t)
	cases := []roundTripCase{{"stories260K", stories, func(s string) string { return legacySpaces(stories, s) }}}
	if _, err := os.Stat(npmDir); err != nil {
		t.Logf("no JS reference tokenizers (%s): run tokenizer/testdata/fetch.sh; testing stories260K only", npmDir)
		return cases
	}
	_, llama3 := reference(t, "llama3", options{})
	_, qwen3 := reference(t, "qwen3", options{})
	_, llama2 := reference(t, "llama2", options{})
	return append(cases,
		roundTripCase{"llama3", llama3, func(s string) string { return s }},
		roundTripCase{"qwen3", qwen3, nfcNormalizer{}.normalize},
		roundTripCase{"llama2", llama2, func(s string) string { return legacySpaces(llama2, s) }},
	)
}

// legacySpaces is what a SentencePiece-style tokenizer whose normalizer
// prepends "▁" gives back for s: every span of text after an added token
// gets the "▁" too, and the decoder strips only the one at the very start;
// a "▁" written in the text comes back as a space.
func legacySpaces(tok *Tokenizer, s string) string {
	var b strings.Builder
	for _, sp := range tok.rawMatcher.split(nil, s, tok.rawAdded) {
		if sp.tok >= 0 {
			b.WriteString(tok.rawAdded[sp.tok].content)
			continue
		}
		if sp.at > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strings.ReplaceAll(sp.text, "▁", " "))
	}
	return b.String()
}

func TestRoundTrip(t *testing.T) {
	corpus := loadCorpus(t)
	for _, c := range roundTripCases(t) {
		t.Run(c.name, func(t *testing.T) {
			lossless := 0
			for _, s := range corpus {
				ids := c.tok.Encode(s, false)
				got := c.tok.Decode(ids, false)
				if want := c.want(s); got != want {
					t.Errorf("Decode(Encode(%q)) = %q, want %q", s, got, want)
				}
				if got == s {
					lossless++
				}
			}
			t.Logf("%s: %d/%d corpus strings round-trip exactly", c.name, lossless, len(corpus))
		})
	}
}

// TestDecoderMatchesDecode streams every corpus encoding through a Decoder,
// after prompts of several lengths, and checks the text after every token
// against a full Decode of that prefix.
func TestDecoderMatchesDecode(t *testing.T) {
	corpus := loadCorpus(t)
	corpus = append(corpus, "Hello 世界 🐻‍❄️ bytes", " leading", "<s> after special", "日本語")
	for _, c := range roundTripCases(t) {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range corpus {
				ids := c.tok.Encode(s, true)
				for _, k := range []int{0, 1, len(ids) / 2, len(ids) - 1} {
					if k < 0 || k > len(ids) {
						continue
					}
					for _, skip := range []bool{false, true} {
						checkStream(t, c.tok, ids[:k], ids[k:], skip)
					}
				}
			}
		})
	}
}

func checkStream(t *testing.T, tok *Tokenizer, prompt, gen []int, skip bool) {
	t.Helper()
	d := tok.NewDecoder(prompt, skip)
	if len(d.pending) > 0 {
		return // the prompt ends inside a character: Decode(prompt) is not a prefix
	}
	base := tok.Decode(prompt, skip)
	var streamed strings.Builder
	for j, id := range gen {
		out := d.Add(id)
		if !utf8.ValidString(out) {
			t.Fatalf("Add returned invalid UTF-8 %q", out)
		}
		streamed.WriteString(out)
		full := tok.Decode(append(append([]int(nil), prompt...), gen[:j+1]...), skip)
		rest, ok := strings.CutPrefix(full, base)
		if !ok {
			t.Fatalf("Decode(prompt+gen[:%d]) = %q does not start with Decode(prompt) = %q", j+1, full, base)
		}
		held, ok := strings.CutPrefix(rest, streamed.String())
		if !ok || (held != "" && held != "\uFFFD") {
			t.Fatalf("prompt %v gen %v skip %v: after %d tokens streamed %q, full decode gives %q", prompt, gen, skip, j+1, streamed.String(), rest)
		}
	}
	streamed.WriteString(d.Flush())
	full := tok.Decode(append(append([]int(nil), prompt...), gen...), skip)
	if want := strings.TrimPrefix(full, base); streamed.String() != want {
		t.Fatalf("prompt %v gen %v skip %v: streamed %q, want %q", prompt, gen, skip, streamed.String(), want)
	}
}
