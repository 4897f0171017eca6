package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

const stories260K = "../model/builtin/stories260K"

func loadStories(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := Load(stories260K)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The reference behaviour in the model's README (llama2.c run.c).
func TestStories260K(t *testing.T) {
	tok := loadStories(t)
	if got, want := tok.Encode("Once upon a time", true), []int{1, 403, 407, 261, 378}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	gen := []int{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}
	const want = ", there was a little girl named Lily. She loved to play"
	prompt := []int{1, 403, 407, 261, 378}
	if got := tok.Decode(gen, false); got != want {
		t.Errorf("Decode(generated) = %q, want %q", got, want)
	}
	full := tok.Decode(append(slices.Clone(prompt), gen...), true)
	if full != "Once upon a time"+want {
		t.Errorf("Decode(prompt+generated) = %q", full)
	}
	d := tok.NewDecoder(prompt, true)
	var b strings.Builder
	for _, id := range gen {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	if got := b.String(); got != full[len("Once upon a time"):] {
		t.Errorf("streamed %q, want %q", got, full[len("Once upon a time"):])
	}
	// A generated token that starts a word keeps its space after the prompt.
	there, ok := tok.TokenID("▁there")
	if !ok {
		t.Fatal("no ▁there")
	}
	if got := tok.NewDecoder(prompt, true).Add(there); got != " there" {
		t.Errorf("Add(▁there) after prompt = %q, want %q", got, " there")
	}
	if got := tok.NewDecoder([]int{1}, true).Add(there); got != "there" {
		t.Errorf("Add(▁there) after BOS only = %q, want %q (leading space stripped as in Decode)", got, "there")
	}

	if tok.BOS() != 1 || !slices.Equal(tok.EOS(), []int{2}) {
		t.Errorf("BOS %d EOS %v, want 1 [2]", tok.BOS(), tok.EOS())
	}
	if tok.VocabSize() != 512 {
		t.Errorf("VocabSize = %d", tok.VocabSize())
	}
	if !tok.IsSpecial(1) || !tok.IsSpecial(2) || !tok.IsSpecial(0) || tok.IsSpecial(403) || tok.IsSpecial(-1) || tok.IsSpecial(512) {
		t.Error("IsSpecial wrong")
	}
	if id, ok := tok.TokenID("<s>"); !ok || id != 1 || tok.Token(1) != "<s>" || tok.Token(600) != "" || tok.Token(-1) != "" {
		t.Error("TokenID/Token wrong for <s>")
	}
	if !strings.Contains(tok.ChatTemplate(), "bos_token") {
		t.Errorf("ChatTemplate = %q", tok.ChatTemplate())
	}
	// Characters outside the 512-token vocabulary fall back to bytes.
	for _, s := range []string{"Once upon a time, 你好 🐻‍❄️!", "x\ty\r\nz", "<s>Hello</s> world"} {
		ids := tok.Encode(s, false)
		if got, want := tok.Decode(ids, false), legacySpaces(tok, s); got != want {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	}
}

func TestDecodeIgnoresBadIDs(t *testing.T) {
	tok := loadStories(t)
	if got := tok.Decode([]int{-5, 403, 1 << 30, 407}, false); got != "Once upon" {
		t.Errorf("Decode = %q", got)
	}
	d := tok.NewDecoder(nil, false)
	if got := d.Add(-1) + d.Add(1<<40) + d.Add(403) + d.Flush(); got != "Once" {
		t.Errorf("stream = %q", got)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := loadStories(t)
	want := tok.Encode(strings.Repeat("Once upon a time there was a dog. ", 20), true)
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func() {
			for i := 0; i < 50; i++ {
				if got := tok.Encode(strings.Repeat("Once upon a time there was a dog. ", 20), true); !slices.Equal(got, want) {
					errs <- fmt.Errorf("concurrent Encode differs")
					return
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
