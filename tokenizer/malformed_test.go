package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMalformed(t *testing.T) {
	good := spec{vocab: []string{"a", "b", "ab"}, merges: []string{"a b"}}
	if _, err := New(good.json(), nil); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	model := func(m string) []byte { return []byte(`{"added_tokens":[],"model":` + m + `}`) }
	withPart := func(part, value string) []byte {
		return []byte(`{"added_tokens":[],"` + part + `":` + value + `,"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`)
	}
	for _, c := range []struct {
		name    string
		tok     []byte
		cfg     string
		wantErr string
	}{
		{"empty", []byte(``), "", "tokenizer.json"},
		{"bad JSON", []byte(`{"model": {`), "", "tokenizer.json"},
		{"not an object", []byte(`[1, 2]`), "", "tokenizer.json"},
		{"no model", []byte(`{"added_tokens":[]}`), "", "model: missing"},
		{"untyped model", model(`{"vocab":{"a":0}}`), "", "missing model type"},
		{"Unigram", model(`{"type":"Unigram","vocab":[["a",0.0]]}`), "", `unsupported model type "Unigram"`},
		{"WordPiece", model(`{"type":"WordPiece","vocab":{"a":0}}`), "", `unsupported model type "WordPiece"`},
		{"empty vocab", model(`{"type":"BPE","vocab":{},"merges":[]}`), "", "empty vocab"},
		{"vocab not a map", model(`{"type":"BPE","vocab":["a"],"merges":[]}`), "", "model"},
		{"negative id", model(`{"type":"BPE","vocab":{"a":-1},"merges":[]}`), "", "out of range"},
		{"huge id", model(`{"type":"BPE","vocab":{"a":99999999999},"merges":[]}`), "", "out of range"},
		{"duplicate id", model(`{"type":"BPE","vocab":{"a":0,"b":0},"merges":[]}`), "", "is given to both"},
		{"merge left unknown", model(`{"type":"BPE","vocab":{"a":0,"ab":1},"merges":["x a"]}`), "", `"x" is not in the vocab`},
		{"merge right unknown", model(`{"type":"BPE","vocab":{"a":0,"ab":1},"merges":["a x"]}`), "", `"x" is not in the vocab`},
		{"merge result unknown", model(`{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}`), "", `merged token "ab"`},
		{"merge pair unknown", model(`{"type":"BPE","vocab":{"a":0,"b":1},"merges":[["a","b"]]}`), "", `merged token "ab"`},
		{"merge not two", model(`{"type":"BPE","vocab":{"a":0},"merges":["a"]}`), "", "not two tokens"},
		{"merge three", model(`{"type":"BPE","vocab":{"a":0},"merges":[["a","a","a"]]}`), "", "want 2 tokens"},
		{"merges not list", model(`{"type":"BPE","vocab":{"a":0},"merges":{}}`), "", "not a list"},
		{"merges mixed", model(`{"type":"BPE","vocab":{"a":0},"merges":["a a", ["a","a"]]}`), "", "merges"},
		{"unk missing", model(`{"type":"BPE","vocab":{"a":0},"merges":[],"unk_token":"<unk>"}`), "", `unk_token "<unk>"`},
		{"suffix", model(`{"type":"BPE","vocab":{"a":0},"merges":[],"end_of_word_suffix":"</w>"}`), "", "end_of_word_suffix"},
		{"prefix", model(`{"type":"BPE","vocab":{"a":0},"merges":[],"continuing_subword_prefix":"##"}`), "", "continuing_subword_prefix"},
		{"normalizer type", withPart("normalizer", `{"type":"BertNormalizer"}`), "", `unsupported normalizer type "BertNormalizer"`},
		{"normalizer in sequence", withPart("normalizer", `{"type":"Sequence","normalizers":[{"type":"NFKC"}]}`), "", `unsupported normalizer type "NFKC"`},
		{"normalizer untyped", withPart("normalizer", `{}`), "", "missing normalizer type"},
		{"normalizer bad regex", withPart("normalizer", `{"type":"Replace","pattern":{"Regex":"("},"content":""}`), "", "Replace"},
		{"pre-tokenizer type", withPart("pre_tokenizer", `{"type":"BertPreTokenizer"}`), "", `unsupported pre-tokenizer type "BertPreTokenizer"`},
		{"split behavior", withPart("pre_tokenizer", `{"type":"Split","pattern":{"String":" "},"behavior":"Sideways"}`), "", `unsupported behavior "Sideways"`},
		{"split bad regex", withPart("pre_tokenizer", `{"type":"Split","pattern":{"Regex":"(?<"},"behavior":"Isolated"}`), "", "compile split regex"},
		{"split no pattern", withPart("pre_tokenizer", `{"type":"Split","behavior":"Isolated"}`), "", "missing pattern"},
		{"metaspace scheme", withPart("pre_tokenizer", `{"type":"Metaspace","replacement":"▁","prepend_scheme":"sometimes"}`), "", "prepend_scheme"},
		{"metaspace replacement", withPart("pre_tokenizer", `{"type":"Metaspace","replacement":"ab"}`), "", "replacement"},
		{"byte level not last", withPart("pre_tokenizer", `{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Digits"}]}`), "", "ByteLevel before"},
		{"decoder type", withPart("decoder", `{"type":"WordPiece","prefix":"##"}`), "", `unsupported decoder type "WordPiece"`},
		{"decoder after fuse", withPart("decoder", `{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"ByteFallback"}]}`), "", "ByteFallback after Fuse"},
		{"strip stop", withPart("decoder", `{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"Strip","content":" ","start":0,"stop":1}]}`), "", "stop > 0"},
		{"strip content", withPart("decoder", `{"type":"Strip","content":"ab","start":1,"stop":0}`), "", "not one character"},
		{"replace regex decoder", withPart("decoder", `{"type":"Replace","pattern":{"Regex":"x"},"content":" "}`), "", "only String patterns"},
		{"replace after fallback", withPart("decoder", `{"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"Replace","pattern":{"String":"▁"},"content":" "}]}`), "", "Replace after ByteFallback"},
		{"post-processor type", withPart("post_processor", `{"type":"BertProcessing","sep":["[SEP]",1],"cls":["[CLS]",0]}`), "", `unsupported post-processor type "BertProcessing"`},
		{"template unknown token", withPart("post_processor", `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{}}`), "", `special token "<s>"`},
		{"template bad id", withPart("post_processor", `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[7]}}}`), "", "outside the vocabulary"},
		{"template no A", withPart("post_processor", `{"type":"TemplateProcessing","single":[],"special_tokens":{}}`), "", "no sequence A"},
		{"template B", withPart("post_processor", `{"type":"TemplateProcessing","single":[{"Sequence":{"id":"B","type_id":0}}],"special_tokens":{}}`), "", `sequence "B"`},
		{"added no id", []byte(`{"added_tokens":[{"content":"<x>"}],"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`), "", "missing id"},
		{"added empty", []byte(`{"added_tokens":[{"id":1,"content":""}],"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`), "", "empty content"},
		{"added negative", []byte(`{"added_tokens":[{"id":-2,"content":"<x>"}],"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`), "", "out of range"},
		{"added id clash", []byte(`{"added_tokens":[{"id":0,"content":"<x>"}],"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`), "", "already belongs"},
		{"config bad JSON", good.json(), `{"bos_token": `, "tokenizer_config.json"},
		{"config unknown bos", good.json(), `{"bos_token": "<s>"}`, `bos_token "<s>" is not a token`},
		{"config bos object", good.json(), `{"bos_token": {"lstrip": false}}`, "neither a string nor an AddedToken"},
		{"config add_bos without bos", good.json(), `{"add_bos_token": true}`, "no bos_token"},
		{"config chat_template", good.json(), `{"chat_template": 7}`, "chat_template"},
	} {
		var cfg []byte
		if c.cfg != "" {
			cfg = []byte(c.cfg)
		}
		tok, err := New(c.tok, cfg)
		if err == nil {
			t.Errorf("%s: no error (tokenizer %v)", c.name, tok != nil)
			continue
		}
		if !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: error %q does not mention %q", c.name, err, c.wantErr)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("Load(empty dir) = %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), spec{vocab: []string{"a"}}.json(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err != nil {
		t.Errorf("Load without tokenizer_config.json: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("Load with a broken tokenizer_config.json = %v", err)
	}
}

// FuzzNew checks that arbitrary tokenizer.json input gives an error or a
// working tokenizer, never a panic.
func FuzzNew(f *testing.F) {
	f.Add(spec{vocab: []string{"a", "b", "ab"}, merges: []string{"a b"}}.json(), "ab ba")
	f.Add(spec{vocab: spVocab("▁", "a", "▁a"), merges: []string{"▁ a"}, added: spAdded, normalizer: `{"type":"Prepend","prepend":"▁"}`,
		decoder: spDecoder, model: `,"unk_token":"<unk>","byte_fallback":true`}.json(), "<s>a é")
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		tok, err := New(data, nil)
		if err != nil {
			return
		}
		ids := tok.Encode(text, true)
		tok.Decode(ids, false)
		d := tok.NewDecoder(nil, true)
		for _, id := range ids {
			d.Add(id)
		}
		d.Flush()
	})
}
