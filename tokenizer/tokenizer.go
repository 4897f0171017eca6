package tokenizer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Tokenizer encodes text to token ids and decodes them back. It is
// immutable after New and safe for concurrent use.
type Tokenizer struct {
	model      *bpeModel
	normalizer normalizer   // nil when none
	pre        preTokenizer // nil when none

	tokens    []string // by id: vocabulary token or added-token content; "" for holes
	isToken   []bool   // by id: some token has this id
	isAdded   []bool   // by id
	special   []bool   // by id: skipped by Decode(ids, true)
	tokenToID map[string]int

	rawAdded    []addedToken // matched in the raw text
	normAdded   []addedToken // matched in normalized text (contents normalized)
	rawMatcher  *addedMatcher
	normMatcher *addedMatcher

	dec decoding

	prefix, suffix []int // added around the ids by Encode(text, true)
	bos            int
	eos            []int
	chatTemplate   string
}

// Load reads dir/tokenizer.json and, when present,
// dir/tokenizer_config.json.
func Load(dir string) (*Tokenizer, error) {
	tok, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := newTokenizer(tok, cfg, options{})
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", dir, err)
	}
	return t, nil
}

// New builds a tokenizer from the contents of a Hugging Face tokenizer.json
// and, optionally (nil), tokenizer_config.json. Unsupported parts (a model
// other than BPE, an unknown normalizer, pre-tokenizer, decoder or
// post-processor) are errors that name the type.
func New(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	t, err := newTokenizer(tokenizerJSON, tokenizerConfigJSON, options{})
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// Encode returns the token ids of text. Added tokens written in the text
// (special ones like "<|im_start|>" included) become their ids. With
// addSpecial, the tokens the model expects around a sequence are added:
// those of the tokenizer.json post_processor template, unless
// tokenizer_config.json says otherwise with add_bos_token / add_eos_token.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	ids := make([]int, 0, len(text)/3+len(t.prefix)+len(t.suffix)+1)
	if addSpecial {
		ids = append(ids, t.prefix...)
	}
	sc.spans = t.rawMatcher.split(sc.spans[:0], text, t.rawAdded)
	for _, sp := range sc.spans {
		if sp.tok >= 0 {
			ids = append(ids, t.rawAdded[sp.tok].id)
			continue
		}
		ids = t.encodeText(ids, sp.text, sp.at == 0, sc)
	}
	if addSpecial {
		ids = append(ids, t.suffix...)
	}
	return ids
}

// encodeText encodes a span of text free of raw-matched added tokens.
func (t *Tokenizer) encodeText(ids []int, s string, atStart bool, sc *scratch) []int {
	if t.normalizer != nil {
		s = t.normalizer.normalize(s)
	}
	if s == "" {
		return ids
	}
	sc.normSpans = t.normMatcher.split(clearSlice(sc.normSpans), s, t.normAdded)
	for _, sp := range sc.normSpans {
		if sp.tok >= 0 {
			ids = append(ids, t.normAdded[sp.tok].id)
			continue
		}
		p := piece{text: sp.text, atStart: atStart && sp.at == 0}
		if t.pre == nil {
			ids = t.model.encodeWord(ids, p.text, sc)
			continue
		}
		sc.pieces = t.pre.split(clearSlice(sc.pieces), p, sc)
		for _, w := range sc.pieces {
			ids = t.model.encodeWord(ids, w.text, sc)
		}
	}
	return ids
}

// VocabSize returns the number of token ids, added tokens included: one more
// than the largest id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS returns the beginning-of-sequence token id, or -1.
func (t *Tokenizer) BOS() int { return t.bos }

// EOS returns the end-of-sequence token ids (tokenizer_config.json
// eos_token), or nil.
func (t *Tokenizer) EOS() []int { return t.eos }

// TokenID returns the id of a token as written in the vocabulary (for
// byte-level models in their byte-level spelling, "Ġthe") or of an added
// token.
func (t *Tokenizer) TokenID(s string) (int, bool) {
	id, ok := t.tokenToID[s]
	return id, ok
}

// Token returns the vocabulary spelling of id, or "" when there is none.
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// IsSpecial reports whether id is a special token: an added token marked
// special, or one named in tokenizer_config.json (bos, eos, unk, pad,
// additional_special_tokens).
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// ChatTemplate returns the Jinja chat template of tokenizer_config.json, or
// "".
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }
