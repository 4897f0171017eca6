package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// options are knobs for tests and benchmarks.
type options struct {
	forceRegexp2 bool // run Split patterns on regexp2 even when hand-written matchers exist
	noCache      bool // disable the BPE word cache
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// newTokenizer builds a Tokenizer in named steps: the pre-tokenizer first
// (it decides whether the model is byte-level), then the model and
// vocabulary, normalizer, added tokens, decoder, post-processor, and last
// tokenizer_config.json.
func newTokenizer(tokJSON, cfgJSON []byte, opt options) (*Tokenizer, error) {
	var f tokenizerFile
	if err := json.Unmarshal(tokJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	var cfg configFile
	if len(bytes.TrimSpace(cfgJSON)) > 0 {
		if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	t := &Tokenizer{bos: -1}
	pre, byteLevel, err := buildPreTokenizer(f.PreTokenizer, opt)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: pre_tokenizer: %w", err)
	}
	t.pre = pre
	vocab, err := t.buildModel(f.Model, byteLevel, opt)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: model: %w", err)
	}
	if t.normalizer, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer.json: normalizer: %w", err)
	}
	if err := t.buildAdded(f.AddedTokens, vocab); err != nil {
		return nil, fmt.Errorf("tokenizer.json: added_tokens: %w", err)
	}
	if err := t.buildDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("tokenizer.json: decoder: %w", err)
	}
	if t.prefix, t.suffix, err = buildPostProcessor(f.PostProcessor, len(t.tokens)); err != nil {
		return nil, fmt.Errorf("tokenizer.json: post_processor: %w", err)
	}
	if err := t.applyConfig(&cfg); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	return t, nil
}

// tokenizerFile is the part of tokenizer.json this package reads.
type tokenizerFile struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         *modelJSON       `json:"model"`
}

type addedTokenJSON struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string     `json:"type"`
	Vocab                   vocabJSON  `json:"vocab"`
	Merges                  mergesJSON `json:"merges"`
	UnkToken                *string    `json:"unk_token"`
	FuseUnk                 bool       `json:"fuse_unk"`
	ByteFallback            bool       `json:"byte_fallback"`
	IgnoreMerges            bool       `json:"ignore_merges"`
	ContinuingSubwordPrefix *string    `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string    `json:"end_of_word_suffix"`
}

// buildModel reads the BPE model and fills the vocabulary; it returns the
// vocabulary as written in the file.
func (t *Tokenizer) buildModel(mj *modelJSON, byteLevel bool, opt options) (map[string]int, error) {
	if mj == nil {
		return nil, errors.New("missing")
	}
	switch mj.Type {
	case "BPE":
	case "":
		return nil, errors.New("missing model type")
	default:
		return nil, fmt.Errorf("unsupported model type %q (only BPE is supported)", mj.Type)
	}
	if mj.Vocab.notObject {
		return nil, errors.New("vocab is not an object")
	}
	if mj.ContinuingSubwordPrefix != nil && *mj.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("unsupported continuing_subword_prefix %q", *mj.ContinuingSubwordPrefix)
	}
	if mj.EndOfWordSuffix != nil && *mj.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("unsupported end_of_word_suffix %q", *mj.EndOfWordSuffix)
	}
	vocab := mj.Vocab.m
	if len(vocab) == 0 {
		return nil, errors.New("empty vocab")
	}
	m := &bpeModel{
		byteLevel:    byteLevel,
		vocab:        make(map[string]int32, len(vocab)),
		unk:          -1,
		fuseUnk:      mj.FuseUnk,
		byteFallback: mj.ByteFallback,
		ignoreMerges: mj.IgnoreMerges,
	}
	if !opt.noCache {
		m.cache = newWordCache()
	}
	size := 0
	for tok, id := range vocab {
		if id < 0 || id > maxTokenID {
			return nil, fmt.Errorf("vocab: token %q has id %d out of range", tok, id)
		}
		size = max(size, id+1)
	}
	t.tokens = make([]string, size)
	t.isToken = make([]bool, size)
	for i := range m.byteIDs {
		m.byteIDs[i], m.fallbackIDs[i] = -1, -1
	}
	for tok, id := range vocab {
		if t.isToken[id] {
			return nil, fmt.Errorf("vocab: id %d is given to both %q and %q", id, t.tokens[id], tok)
		}
		t.tokens[id], t.isToken[id] = tok, true
		key := tok
		if byteLevel {
			b, ok := byteLevelToBytes(tok)
			if !ok {
				continue // not a byte-level token: BPE can never produce it
			}
			key = string(b)
			if len(b) == 1 {
				m.byteIDs[b[0]] = int32(id)
			}
		}
		m.vocab[key] = int32(id)
		if b, ok := byteFallbackByte(tok); ok && tok == fmt.Sprintf("<0x%02X>", b) {
			m.fallbackIDs[b] = int32(id)
		}
	}
	if mj.UnkToken != nil {
		id, ok := vocab[*mj.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocab", *mj.UnkToken)
		}
		m.unk = int32(id)
	}
	merges := mj.Merges.pairs
	m.merges = make(map[uint64]merge, len(merges))
	for rank, pair := range merges {
		a, okA := vocab[pair[0]]
		b, okB := vocab[pair[1]]
		c, okC := vocab[pair[0]+pair[1]]
		switch {
		case !okA:
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocab", rank, pair[0], pair[1], pair[0])
		case !okB:
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocab", rank, pair[0], pair[1], pair[1])
		case !okC:
			return nil, fmt.Errorf("merge %d (%q %q): merged token %q is not in the vocab", rank, pair[0], pair[1], pair[0]+pair[1])
		}
		// A later duplicate overrides an earlier one, as in tokenizers and
		// transformers.js.
		m.merges[pairKey(int32(a), int32(b))] = merge{rank: int32(rank), id: int32(c)}
	}
	m.splitMeta = canSplitMeta(vocab, byteLevel, m.ignoreMerges)
	t.model = m
	return vocab, nil
}

// maxTokenID bounds ids so that a corrupt file cannot ask for a huge table.
const maxTokenID = 1 << 24

// buildAdded registers the added tokens and their matchers.
func (t *Tokenizer) buildAdded(list []addedTokenJSON, vocab map[string]int) error {
	for i, a := range list {
		if a.ID == nil {
			return fmt.Errorf("token %d (%q): missing id", i, a.Content)
		}
		if *a.ID < 0 || *a.ID > maxTokenID {
			return fmt.Errorf("token %q: id %d out of range", a.Content, *a.ID)
		}
		if a.Content == "" {
			return fmt.Errorf("token %d: empty content", *a.ID)
		}
		if id, ok := vocab[a.Content]; ok && id != *a.ID {
			return fmt.Errorf("token %q has id %d but the vocab gives it %d", a.Content, *a.ID, id)
		}
		normalized := !a.Special
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		at := addedToken{id: *a.ID, content: a.Content, special: a.Special, normalized: normalized,
			lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord}
		for len(t.tokens) <= at.id {
			t.tokens = append(t.tokens, "")
			t.isToken = append(t.isToken, false)
		}
		if t.isToken[at.id] && t.tokens[at.id] != at.content {
			return fmt.Errorf("token %q: id %d already belongs to %q", at.content, at.id, t.tokens[at.id])
		}
		t.tokens[at.id], t.isToken[at.id] = at.content, true
		if at.normalized && t.normalizer != nil {
			at.content = t.normalizer.normalize(at.content)
			t.normAdded = append(t.normAdded, at)
		} else if at.normalized {
			t.normAdded = append(t.normAdded, at)
		} else {
			t.rawAdded = append(t.rawAdded, at)
		}
	}
	t.isAdded = make([]bool, len(t.tokens))
	t.special = make([]bool, len(t.tokens))
	t.tokenToID = make(map[string]int, len(t.tokens))
	for id, tok := range t.tokens {
		if t.isToken[id] {
			t.tokenToID[tok] = id
		}
	}
	for _, list := range [][]addedToken{t.rawAdded, t.normAdded} {
		for _, a := range list {
			t.isAdded[a.id] = true
			t.special[a.id] = a.special
		}
	}
	content := func(a addedToken) string { return a.content }
	t.rawMatcher = newAddedMatcher(t.rawAdded, content)
	t.normMatcher = newAddedMatcher(t.normAdded, content)
	return nil
}
