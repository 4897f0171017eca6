package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// Building the tokenizer.json pipeline components: normalizer,
// pre_tokenizer, decoder and post_processor.

// componentJSON holds the fields of every normalizer, pre-tokenizer,
// post-processor and decoder this package supports, told apart by Type.
type componentJSON struct {
	Type string `json:"type"`

	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Decoders      []json.RawMessage `json:"decoders"`
	Processors    []json.RawMessage `json:"processors"`

	Prepend    string       `json:"prepend"`
	Pattern    *patternJSON `json:"pattern"`
	Content    string       `json:"content"`
	StripLeft  bool         `json:"strip_left"`
	StripRight bool         `json:"strip_right"`

	Behavior         string `json:"behavior"`
	Invert           bool   `json:"invert"`
	AddPrefixSpace   *bool  `json:"add_prefix_space"`
	UseRegex         *bool  `json:"use_regex"`
	Replacement      string `json:"replacement"`
	PrependScheme    string `json:"prepend_scheme"`
	Split            *bool  `json:"split"`
	IndividualDigits bool   `json:"individual_digits"`

	Start int `json:"start"`
	Stop  int `json:"stop"`

	Single        []templateItemJSON           `json:"single"`
	SpecialTokens map[string]templateTokenJSON `json:"special_tokens"`
}

type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type templateItemJSON struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type templateTokenJSON struct {
	IDs []int `json:"ids"`
}

func parseComponent(raw json.RawMessage, what string) (*componentJSON, error) {
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &c, nil
}

func buildNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	c, err := parseComponent(raw, "normalizer")
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var seq normalizerSeq
		for _, sub := range c.Normalizers {
			n, err := buildNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	case "NFC":
		return nfcNormalizer{}, nil
	case "NFD":
		return nfdNormalizer{}, nil
	case "Prepend":
		return prependNormalizer{c.Prepend}, nil
	case "Replace":
		if c.Pattern == nil {
			return nil, errors.New("type Replace: missing pattern")
		}
		if c.Pattern.String != nil {
			return replaceNormalizer{*c.Pattern.String, c.Content}, nil
		}
		if c.Pattern.Regex != nil {
			re, err := regexp2.Compile(*c.Pattern.Regex, regexp2.None)
			if err != nil {
				return nil, fmt.Errorf("type Replace: %w", err)
			}
			return regexpReplaceNormalizer{re, c.Content}, nil
		}
		return nil, errors.New("type Replace: pattern is neither String nor Regex")
	case "Strip":
		return stripNormalizer{c.StripLeft, c.StripRight}, nil
	case "":
		return nil, errors.New("missing normalizer type")
	}
	return nil, fmt.Errorf("unsupported normalizer type %q", c.Type)
}

// buildPreTokenizer returns the pre-tokenizer (nil when it does nothing)
// and whether the model is byte-level (a ByteLevel pre-tokenizer, last).
func buildPreTokenizer(raw json.RawMessage, opt options) (preTokenizer, bool, error) {
	if isNull(raw) {
		return nil, false, nil
	}
	c, err := parseComponent(raw, "pre_tokenizer")
	if err != nil {
		return nil, false, err
	}
	switch c.Type {
	case "Sequence":
		var seq preTokenizerSeq
		byteLevel := false
		for i, sub := range c.PreTokenizers {
			p, bl, err := buildPreTokenizer(sub, opt)
			if err != nil {
				return nil, false, err
			}
			if bl && i != len(c.PreTokenizers)-1 {
				return nil, false, errors.New("unsupported: ByteLevel before other pre-tokenizers in a Sequence")
			}
			byteLevel = byteLevel || bl
			if p != nil {
				seq = append(seq, p)
			}
		}
		switch len(seq) {
		case 0:
			return nil, byteLevel, nil
		case 1:
			return seq[0], byteLevel, nil
		}
		return seq, byteLevel, nil
	case "Split":
		if c.Pattern == nil {
			return nil, false, errors.New("type Split: missing pattern")
		}
		b, ok := splitBehaviors[c.Behavior]
		if !ok {
			return nil, false, fmt.Errorf("type Split: unsupported behavior %q", c.Behavior)
		}
		var m matcher
		switch {
		case c.Pattern.Regex != nil:
			if m, err = compilePattern(*c.Pattern.Regex, opt.forceRegexp2); err != nil {
				return nil, false, fmt.Errorf("type Split: %w", err)
			}
		case c.Pattern.String != nil:
			m = stringMatcher{*c.Pattern.String}
		default:
			return nil, false, errors.New("type Split: pattern is neither String nor Regex")
		}
		return splitPre{m: m, behavior: b, invert: c.Invert}, false, nil
	case "ByteLevel":
		useRegex := c.UseRegex == nil || *c.UseRegex
		prefix := c.AddPrefixSpace != nil && *c.AddPrefixSpace
		if !useRegex && !prefix {
			return nil, true, nil
		}
		return byteLevelPre{addPrefixSpace: prefix, useRegex: useRegex}, true, nil
	case "Metaspace":
		ms, err := metaspaceOptions(c)
		if err != nil {
			return nil, false, err
		}
		ms.splitRepl = c.Split == nil || *c.Split
		return ms, false, nil
	case "Digits":
		return splitPre{m: numericMatcher{individual: c.IndividualDigits}, behavior: splitIsolated}, false, nil
	case "":
		return nil, false, errors.New("missing pre-tokenizer type")
	}
	return nil, false, fmt.Errorf("unsupported pre-tokenizer type %q", c.Type)
}

// metaspaceOptions reads the replacement and prepend scheme of a Metaspace
// pre-tokenizer or decoder; files without prepend_scheme use
// add_prefix_space (true: always).
func metaspaceOptions(c *componentJSON) (metaspacePre, error) {
	if utf8.RuneCountInString(c.Replacement) != 1 {
		return metaspacePre{}, fmt.Errorf("type Metaspace: replacement %q is not one character", c.Replacement)
	}
	ms := metaspacePre{repl: c.Replacement}
	switch c.PrependScheme {
	case "always":
		ms.scheme = prependAlways
	case "first":
		ms.scheme = prependFirst
	case "never":
		ms.scheme = prependNever
	case "":
		ms.scheme = prependNever
		if c.AddPrefixSpace == nil || *c.AddPrefixSpace {
			ms.scheme = prependAlways
		}
	default:
		return metaspacePre{}, fmt.Errorf("type Metaspace: unknown prepend_scheme %q", c.PrependScheme)
	}
	return ms, nil
}

// buildDecoder compiles the decoder into per-token pieces and a leading
// strip (see decoding).
func (t *Tokenizer) buildDecoder(raw json.RawMessage) error {
	var steps []decodeStep
	fused := false
	var add func(raw json.RawMessage) error
	add = func(raw json.RawMessage) error {
		c, err := parseComponent(raw, "decoder")
		if err != nil {
			return err
		}
		if fused && c.Type != "Strip" {
			return fmt.Errorf("unsupported: %s after Fuse", c.Type)
		}
		switch c.Type {
		case "Sequence":
			for _, sub := range c.Decoders {
				if err := add(sub); err != nil {
					return err
				}
			}
		case "Replace":
			if c.Pattern == nil || c.Pattern.String == nil {
				return errors.New("type Replace: only String patterns are supported")
			}
			steps = append(steps, decodeStep{kind: "Replace", old: *c.Pattern.String, new: c.Content})
		case "ByteFallback", "ByteLevel":
			steps = append(steps, decodeStep{kind: c.Type})
		case "Metaspace":
			ms, err := metaspaceOptions(c)
			if err != nil {
				return err
			}
			steps = append(steps, decodeStep{kind: "Metaspace", old: ms.repl, metaFirst: ms.scheme != prependNever})
		case "Fuse":
			fused = true
		case "Strip":
			r, n := utf8.DecodeRuneInString(c.Content)
			if n == 0 || n != len(c.Content) {
				return fmt.Errorf("type Strip: content %q is not one character", c.Content)
			}
			if c.Start < 0 || c.Stop < 0 {
				return errors.New("type Strip: negative start or stop")
			}
			if !fused {
				steps = append(steps, decodeStep{kind: "Strip", content: r, start: c.Start, stop: c.Stop})
				break
			}
			if c.Stop > 0 {
				return errors.New("unsupported: Strip with stop > 0 after Fuse")
			}
			if t.dec.stripN > 0 && t.dec.strip != r {
				return errors.New("unsupported: two Strip decoders with different content after Fuse")
			}
			t.dec.strip, t.dec.stripN = r, t.dec.stripN+c.Start
		case "":
			return errors.New("missing decoder type")
		default:
			return fmt.Errorf("unsupported decoder type %q", c.Type)
		}
		return nil
	}
	if !isNull(raw) {
		if err := add(raw); err != nil {
			return err
		}
	}
	// The steps run in order on each token; a Replace or Metaspace after
	// ByteFallback would need the bytes of a run of byte tokens first.
	sawFallback := false
	for _, st := range steps {
		if sawFallback && (st.kind == "Replace" || st.kind == "Metaspace") {
			return fmt.Errorf("unsupported: %s after ByteFallback", st.kind)
		}
		sawFallback = sawFallback || st.kind == "ByteFallback"
	}
	t.dec.pieces = buildPieces(t.tokens, t.isAdded, steps, false)
	for _, st := range steps {
		if st.kind == "Metaspace" && st.metaFirst {
			t.dec.firstPieces = buildPieces(t.tokens, t.isAdded, steps, true)
			break
		}
	}
	return nil
}

// buildPostProcessor returns the ids a TemplateProcessing puts around a
// single sequence; other post-processors add nothing.
func buildPostProcessor(raw json.RawMessage, vocabSize int) (prefix, suffix []int, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	c, err := parseComponent(raw, "post_processor")
	if err != nil {
		return nil, nil, err
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		for _, sub := range c.Processors {
			p, s, err := buildPostProcessor(sub, vocabSize)
			if err != nil {
				return nil, nil, err
			}
			prefix, suffix = append(prefix, p...), append(s, suffix...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seen := false
		for _, item := range c.Single {
			switch {
			case item.Sequence != nil:
				if item.Sequence.ID != "A" {
					return nil, nil, fmt.Errorf("type TemplateProcessing: single template refers to sequence %q", item.Sequence.ID)
				}
				if seen {
					return nil, nil, errors.New("type TemplateProcessing: sequence A twice in the single template")
				}
				seen = true
			case item.SpecialToken != nil:
				tok, ok := c.SpecialTokens[item.SpecialToken.ID]
				if !ok {
					return nil, nil, fmt.Errorf("type TemplateProcessing: special token %q is not in special_tokens", item.SpecialToken.ID)
				}
				for _, id := range tok.IDs {
					if id < 0 || id >= vocabSize {
						return nil, nil, fmt.Errorf("type TemplateProcessing: special token %q has id %d outside the vocabulary", item.SpecialToken.ID, id)
					}
				}
				if seen {
					suffix = append(suffix, tok.IDs...)
				} else {
					prefix = append(prefix, tok.IDs...)
				}
			default:
				return nil, nil, errors.New("type TemplateProcessing: item is neither SpecialToken nor Sequence")
			}
		}
		if !seen {
			return nil, nil, errors.New("type TemplateProcessing: single template has no sequence A")
		}
		return prefix, suffix, nil
	case "":
		return nil, nil, errors.New("missing post-processor type")
	}
	return nil, nil, fmt.Errorf("unsupported post-processor type %q", c.Type)
}
