package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// spec describes a small tokenizer.json for tests.
type spec struct {
	vocab         []string // id = index
	merges        []string // "a b"
	added         string   // JSON list, or ""
	normalizer    string   // JSON, or "" for null
	preTokenizer  string
	postProcessor string
	decoder       string
	model         string // extra JSON fields of the model, starting with a comma
	config        string // tokenizer_config.json, or "" for none
}

func (s spec) json() []byte {
	vocab := map[string]int{}
	for i, v := range s.vocab {
		vocab[v] = i
	}
	vj, _ := json.Marshal(vocab)
	mj, _ := json.Marshal(s.merges)
	if s.merges == nil {
		mj = []byte("[]")
	}
	orNull := func(x string) string {
		if x == "" {
			return "null"
		}
		return x
	}
	added := s.added
	if added == "" {
		added = "[]"
	}
	return []byte(fmt.Sprintf(`{"version":"1.0","added_tokens":%s,"normalizer":%s,"pre_tokenizer":%s,"post_processor":%s,"decoder":%s,
		"model":{"type":"BPE","vocab":%s,"merges":%s%s}}`,
		added, orNull(s.normalizer), orNull(s.preTokenizer), orNull(s.postProcessor), orNull(s.decoder), vj, mj, s.model))
}

func (s spec) build(t *testing.T) *Tokenizer {
	t.Helper()
	var cfg []byte
	if s.config != "" {
		cfg = []byte(s.config)
	}
	tok, err := New(s.json(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tokens returns the vocabulary spelling of ids, for readable failures.
func tokens(tok *Tokenizer, ids []int) []string {
	var out []string
	for _, id := range ids {
		out = append(out, tok.Token(id))
	}
	return out
}

func byteLevelVocab(extra ...string) []string {
	var v []string
	for b := 0; b < 256; b++ {
		v = append(v, string(byteToRune[b]))
	}
	return append(v, extra...)
}

const (
	spDecoder = `{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}`
	spAdded   = `[{"id":0,"content":"<unk>","special":true,"normalized":false},{"id":1,"content":"<s>","special":true,"normalized":false},{"id":2,"content":"</s>","special":true,"normalized":false}]`
)

func spVocab(extra ...string) []string {
	v := []string{"<unk>", "<s>", "</s>"}
	for b := 0; b < 256; b++ {
		v = append(v, fmt.Sprintf("<0x%02X>", b))
	}
	return append(v, extra...)
}

func TestMergeOrder(t *testing.T) {
	// "aaa" with merge "a a": the leftmost pair merges first.
	tok := spec{vocab: []string{"a", "aa", "b", "ab", "aab"}, merges: []string{"a a", "a b", "aa b"}}.build(t)
	for text, want := range map[string][]string{
		"aaa":  {"aa", "a"},
		"aaaa": {"aa", "aa"},
		"aab":  {"aab"}, // "a a" (rank 0) before "a b" (rank 1), then "aa b"
		"ab":   {"ab"},
		"aaab": {"aa", "ab"},
		"ba":   {"b", "a"},
	} {
		if got := tokens(tok, tok.Encode(text, false)); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", text, got, want)
		}
	}
}

// TestMergeSmallMatchesHeap checks the two merge algorithms against each
// other on words of every length around the switch-over.
func TestMergeSmallMatchesHeap(t *testing.T) {
	tok := loadStories(t)
	m := tok.model
	text := strings.Repeat("▁Once▁upon▁a▁time▁there▁was▁a▁little▁girl▁named▁Lily.", 4)
	sc := new(scratch)
	for n := 1; n < len(text); n += 7 {
		w := strings.ToValidUTF8(text[:n], "")
		if len(m.initialSymbols(nil, w)) < 2 {
			continue
		}
		a := m.mergeSmall(m.initialSymbols(nil, w), sc)
		b := m.mergeHeap(m.initialSymbols(nil, w), sc)
		if !slices.Equal(a, b) {
			t.Fatalf("%q: small %v, heap %v", w, a, b)
		}
	}
}

func TestIgnoreMerges(t *testing.T) {
	// "abc" is a token, but merges alone would give "ab" "c".
	s := spec{vocab: []string{"a", "b", "c", "ab", "abc"}, merges: []string{"a b"}}
	if got := tokens(s.build(t), s.build(t).Encode("abc", false)); !slices.Equal(got, []string{"ab", "c"}) {
		t.Errorf("without ignore_merges: %v", got)
	}
	s.model = `,"ignore_merges":true`
	tok := s.build(t)
	if got := tokens(tok, tok.Encode("abc", false)); !slices.Equal(got, []string{"abc"}) {
		t.Errorf("with ignore_merges: %v", got)
	}
}

func TestUnknownTokens(t *testing.T) {
	base := spec{vocab: []string{"<unk>", "a", "b"}}
	for _, c := range []struct {
		model string
		want  []string
	}{
		{`,"unk_token":"<unk>"`, []string{"a", "<unk>", "<unk>", "b"}},
		{`,"unk_token":"<unk>","fuse_unk":true`, []string{"a", "<unk>", "b"}},
		{``, []string{"a", "b"}}, // no unknown token: dropped, as in tokenizers
	} {
		s := base
		s.model = c.model
		tok := s.build(t)
		if got := tokens(tok, tok.Encode("axyb", false)); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.model, got, c.want)
		}
	}
	// byte_fallback without the byte tokens falls back to <unk>.
	s := spec{vocab: []string{"<unk>", "a", "<0xC3>"}, model: `,"unk_token":"<unk>","byte_fallback":true`}
	tok := s.build(t)
	if got := tokens(tok, tok.Encode("aé", false)); !slices.Equal(got, []string{"a", "<unk>"}) {
		t.Errorf("partial byte fallback: %v", got)
	}
}

func TestAddedTokenOptions(t *testing.T) {
	added := `[{"id":3,"content":"<L>","lstrip":true,"special":true,"normalized":false},
		{"id":4,"content":"<R>","rstrip":true,"special":true,"normalized":false},
		{"id":5,"content":"cat","single_word":true,"special":false,"normalized":false},
		{"id":6,"content":"<a>","special":false,"normalized":false},
		{"id":7,"content":"<ab>","special":false,"normalized":false}]`
	tok := spec{vocab: []string{" ", "x", "c"}, added: added, model: `,"unk_token":null`}.build(t)
	for text, want := range map[string][]string{
		"x  <L>x":  {"x", "<L>", "x"},
		"x<R>  x":  {"x", "<R>", "x"},
		"x <L> x":  {"x", "<L>", " ", "x"},
		"cat":      {"cat"},
		"x cat x":  {"x", " ", "cat", " ", "x"},
		"xcat":     {"x", "c"}, // not a single word: "cat" spelled out ("a", "t" unknown, dropped)
		"<ab><a>":  {"<ab>", "<a>"},
		"<a<ab>>x": {"<ab>", "x"}, // "<", "a", ">" are unknown and dropped
	} {
		if got := tokens(tok, tok.Encode(text, false)); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %q, want %q", text, got, want)
		}
	}
	if tok.IsSpecial(5) || !tok.IsSpecial(3) {
		t.Error("IsSpecial wrong for added tokens")
	}
	if got := tok.Decode([]int{1, 3, 1, 6, 2}, true); got != "xx<a>c" {
		t.Errorf("Decode skipping special = %q", got)
	}
}

func TestNormalizedAddedToken(t *testing.T) {
	// A normalized added token is matched after normalization (here: after
	// lower-casing "X" to "x" would be needed, so use Replace).
	s := spec{
		vocab:      []string{"a", "b", "y"},
		added:      `[{"id":3,"content":"yy","special":false,"normalized":true}]`,
		normalizer: `{"type":"Replace","pattern":{"String":"x"},"content":"y"}`,
	}
	tok := s.build(t)
	if got := tokens(tok, tok.Encode("axxb", false)); !slices.Equal(got, []string{"a", "yy", "b"}) {
		t.Errorf("Encode = %v", got)
	}
}

func TestSplitBehaviors(t *testing.T) {
	p := piece{text: "a,b,,c", atStart: true}
	matches := stringMatcher{","}.appendMatches(nil, p.text)
	for _, c := range []struct {
		b      splitBehavior
		invert bool
		want   []string
	}{
		{splitRemoved, false, []string{"a", "b", "c"}},
		{splitIsolated, false, []string{"a", ",", "b", ",", ",", "c"}},
		{splitMergedWithPrevious, false, []string{"a,", "b,", ",", "c"}},
		{splitMergedWithNext, false, []string{"a", ",b", ",", ",c"}},
		{splitContiguous, false, []string{"a", ",", "b", ",,", "c"}},
		{splitRemoved, true, []string{",", ",", ","}},
	} {
		var got []string
		for _, q := range splitByBehavior(nil, p, matches, c.b, c.invert) {
			got = append(got, q.text)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("behavior %d invert %v: %q, want %q", c.b, c.invert, got, c.want)
		}
	}
}

func TestDigitsPreTokenizer(t *testing.T) {
	for _, c := range []struct {
		individual bool
		want       []string
	}{
		{true, []string{"ab", "1", "2", "3", "c", "4"}},
		{false, []string{"ab", "123", "c", "4"}},
	} {
		var got []string
		for _, q := range (splitPre{m: numericMatcher{c.individual}, behavior: splitIsolated}).split(nil, piece{text: "ab123c4"}, new(scratch)) {
			got = append(got, q.text)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("individual %v: %q", c.individual, got)
		}
	}
}

// TestMetaspace covers the Metaspace pre-tokenizer and decoder (Mistral-style
// tokenizer.json files) and their prepend schemes.
func TestMetaspace(t *testing.T) {
	vocab := spVocab("▁", "▁a", "▁b", "a", "b", "▁▁")
	for _, c := range []struct {
		pre, dec string
		text     string
		want     []string
		decoded  string
	}{
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`,
			`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`,
			"a b", []string{"▁a", "▁b"}, "a b"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false}`, spDecoder,
			"<s>a b", []string{"<s>", "a", "▁b"}, "<s>a b"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false}`, spDecoder,
			"a<s>b", []string{"▁a", "<s>", "b"}, "a<s>b"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":false}`, spDecoder,
			"a<s>b", []string{"▁a", "<s>", "▁b"}, "a<s> b"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"never","split":true}`,
			`{"type":"Metaspace","replacement":"▁","prepend_scheme":"never","split":true}`,
			"a  b", []string{"a", "▁", "▁b"}, "a  b"},
		{`{"type":"Metaspace","replacement":"▁","add_prefix_space":true,"split":false}`,
			`{"type":"Metaspace","replacement":"▁","add_prefix_space":true}`,
			"  a", []string{"▁▁", "a"}, "a"}, // the decoder drops every "▁" of the first token
	} {
		tok := spec{vocab: vocab, merges: []string{"▁ ▁", "▁ a", "▁ b"}, added: spAdded, preTokenizer: c.pre, decoder: c.dec,
			model: `,"unk_token":"<unk>","byte_fallback":true`}.build(t)
		ids := tok.Encode(c.text, false)
		if got := tokens(tok, ids); !slices.Equal(got, c.want) {
			t.Errorf("%s: Encode(%q) = %q, want %q", c.pre, c.text, got, c.want)
		}
		if got := tok.Decode(ids, false); got != c.decoded {
			t.Errorf("%s: Decode = %q, want %q", c.pre, got, c.decoded)
		}
		checkStream(t, tok, nil, ids, false)
		checkStream(t, tok, ids[:1], ids[1:], false)
	}
}

func TestByteLevelPreTokenizerOptions(t *testing.T) {
	vocab := byteLevelVocab("Ġa", "Ġb")
	s := spec{vocab: vocab, merges: []string{"Ġ a", "Ġ b"},
		preTokenizer: `{"type":"ByteLevel","add_prefix_space":true,"use_regex":true}`,
		decoder:      `{"type":"ByteLevel"}`}
	tok := s.build(t)
	if got := tokens(tok, tok.Encode("a b", false)); !slices.Equal(got, []string{"Ġa", "Ġb"}) {
		t.Errorf("Encode = %q", got)
	}
	if got := tok.Decode(tok.Encode("a b", false), false); got != " a b" {
		t.Errorf("Decode = %q", got)
	}
}

func TestStrayBytesDecode(t *testing.T) {
	tok := spec{vocab: byteLevelVocab(), preTokenizer: `{"type":"ByteLevel","use_regex":false}`, decoder: `{"type":"ByteLevel"}`}.build(t)
	// 0xE4 0xB8 (an unfinished 3-byte character), "a", a lone 0x80, 0xF0 0x9F.
	ids := []int{0xE4, 0xB8, 'a', 0x80, 0xF0, 0x9F}
	if got, want := tok.Decode(ids, false), "\uFFFDa\uFFFD\uFFFD"; got != want {
		t.Errorf("Decode = %q, want %q", got, want)
	}
	d := tok.NewDecoder(nil, false)
	var parts []string
	for _, id := range ids {
		parts = append(parts, d.Add(id))
	}
	parts = append(parts, d.Flush())
	if want := []string{"", "", "\uFFFDa", "\uFFFD", "", "", "\uFFFD"}; !slices.Equal(parts, want) {
		t.Errorf("stream = %q, want %q", parts, want)
	}
	for k := 0; k <= len(ids); k++ {
		checkStream(t, tok, nil, ids[:k], false)
	}
}

func TestTokenizerConfig(t *testing.T) {
	template := `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
		"pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}}`
	base := spec{vocab: spVocab("▁", "a", "▁a"), merges: []string{"▁ a"}, added: spAdded, normalizer: `{"type":"Prepend","prepend":"▁"}`, decoder: spDecoder,
		model: `,"unk_token":"<unk>","byte_fallback":true`}
	for _, c := range []struct {
		name, post, config string
		want               []int
		bos                int
		eos                []int
		template           string
	}{
		{"template", template, ``, []int{1, 261}, 1, nil, ""},
		{"template, add_bos_token false", template, `{"add_bos_token":false,"bos_token":"<s>"}`, []int{261}, 1, nil, ""},
		{"no template, add_bos/eos", ``,
			`{"add_bos_token":true,"add_eos_token":true,"bos_token":{"__type":"AddedToken","content":"<s>"},"eos_token":"</s>",
			"chat_template":[{"name":"tool_use","template":"T"},{"name":"default","template":"D"}]}`, []int{1, 261, 2}, 1, []int{2}, "D"},
		{"nothing", ``, `{"bos_token":null,"eos_token":"</s>","chat_template":"C"}`, []int{261}, -1, []int{2}, "C"},
	} {
		s := base
		s.postProcessor, s.config = c.post, c.config
		tok := s.build(t)
		if got := tok.Encode("a", true); !slices.Equal(got, c.want) {
			t.Errorf("%s: Encode = %v, want %v", c.name, got, c.want)
		}
		if got := tok.Encode("a", false); !slices.Equal(got, []int{261}) {
			t.Errorf("%s: Encode without special = %v", c.name, got)
		}
		if tok.BOS() != c.bos || !slices.Equal(tok.EOS(), c.eos) || tok.ChatTemplate() != c.template {
			t.Errorf("%s: BOS %d EOS %v template %q", c.name, tok.BOS(), tok.EOS(), tok.ChatTemplate())
		}
	}
}

// TestSplitMeta checks that words are cut before "▁" only when no token
// has "▁" after another rune.
func TestSplitMeta(t *testing.T) {
	s := spec{vocab: []string{"▁", "a", "b", "▁a", "▁b", "b▁", "b▁a"}, merges: []string{"b ▁", "b▁ a", "▁ a", "▁ b"}}
	tok := s.build(t)
	if tok.model.splitMeta {
		t.Fatal("splitMeta with a token that has ▁ after b")
	}
	if got := tokens(tok, tok.Encode("▁b▁a", false)); !slices.Equal(got, []string{"▁", "b▁a"}) {
		t.Errorf("Encode = %q", got)
	}
	if got := tokens(tok, tok.Encode("b▁a", false)); !slices.Equal(got, []string{"b▁a"}) {
		t.Errorf("Encode = %q", got)
	}
	s = spec{vocab: []string{"▁", "a", "b", "▁a", "▁b", "▁▁", "▁▁b"}, merges: []string{"▁ ▁", "▁▁ b", "▁ a", "▁ b"}}
	tok = s.build(t)
	if !tok.model.splitMeta {
		t.Fatal("no splitMeta")
	}
	if got := tokens(tok, tok.Encode("a▁▁b▁a", false)); !slices.Equal(got, []string{"a", "▁▁b", "▁a"}) {
		t.Errorf("Encode = %q", got)
	}
}

// TestLlama31PostProcessor: Llama 3.1 files add <|begin_of_text|> through a
// Sequence of ByteLevel and TemplateProcessing.
func TestLlama31PostProcessor(t *testing.T) {
	s := spec{
		vocab:        byteLevelVocab("Hi"),
		merges:       []string{"H i"},
		added:        `[{"id":257,"content":"<|begin_of_text|>","special":true,"normalized":false},{"id":258,"content":"<|eot_id|>","special":true,"normalized":false}]`,
		preTokenizer: `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"` + strings.ReplaceAll(patternLlama3, `\`, `\\`) + `"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]}`,
		postProcessor: `{"type":"Sequence","processors":[{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true},
			{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|begin_of_text|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
			"pair":[],"special_tokens":{"<|begin_of_text|>":{"id":"<|begin_of_text|>","ids":[257],"tokens":["<|begin_of_text|>"]}}}]}`,
		decoder: `{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}`,
		config:  `{"bos_token":"<|begin_of_text|>","eos_token":"<|eot_id|>"}`,
	}
	tok := s.build(t)
	if _, ok := tok.pre.(splitPre).m.(llama3Matcher); !ok {
		t.Errorf("Llama 3 split pattern not on the hand-written matcher: %T", tok.pre)
	}
	if got := tok.Encode("Hi", true); !slices.Equal(got, []int{257, 256}) {
		t.Errorf("Encode = %v", got)
	}
	if tok.BOS() != 257 || !slices.Equal(tok.EOS(), []int{258}) {
		t.Errorf("BOS %d EOS %v", tok.BOS(), tok.EOS())
	}
	if got := tok.Decode([]int{257, 256, 256}, false); got != "<|begin_of_text|>HiHi" {
		t.Errorf("Decode = %q", got)
	}
}
