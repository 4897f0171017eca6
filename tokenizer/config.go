package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
)

// configFile is the part of tokenizer_config.json this package reads.
type configFile struct {
	AddBOS            *bool             `json:"add_bos_token"`
	AddEOS            *bool             `json:"add_eos_token"`
	BOS               json.RawMessage   `json:"bos_token"`
	EOS               json.RawMessage   `json:"eos_token"`
	UNK               json.RawMessage   `json:"unk_token"`
	PAD               json.RawMessage   `json:"pad_token"`
	AdditionalSpecial []json.RawMessage `json:"additional_special_tokens"`
	ChatTemplate      json.RawMessage   `json:"chat_template"`
}

// tokenString reads a special token of tokenizer_config.json: a string, an
// AddedToken object ({"content": ...}), or null.
func tokenString(raw json.RawMessage) (string, bool, error) {
	if isNull(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, fmt.Errorf("special token %s is neither a string nor an AddedToken", raw)
	}
	return *obj.Content, true, nil
}

// applyConfig reads tokenizer_config.json: special tokens, whether to add
// BOS/EOS, and the chat template.
func (t *Tokenizer) applyConfig(cfg *configFile) error {
	lookup := func(name string, raw json.RawMessage) (int, error) {
		s, ok, err := tokenString(raw)
		if err != nil || !ok {
			return -1, err
		}
		id, found := t.tokenToID[s]
		if !found {
			return -1, fmt.Errorf("%s %q is not a token", name, s)
		}
		return id, nil
	}
	var err error
	if t.bos, err = lookup("bos_token", cfg.BOS); err != nil {
		return err
	}
	eos, err := lookup("eos_token", cfg.EOS)
	if err != nil {
		return err
	}
	if eos >= 0 {
		t.eos = []int{eos}
		t.special[eos] = true
	}
	if t.bos >= 0 {
		t.special[t.bos] = true
	}
	for name, raw := range map[string]json.RawMessage{"unk_token": cfg.UNK, "pad_token": cfg.PAD} {
		id, err := lookup(name, raw)
		if err != nil {
			return err
		}
		if id >= 0 {
			t.special[id] = true
		}
	}
	for _, raw := range cfg.AdditionalSpecial {
		id, err := lookup("additional_special_tokens", raw)
		if err != nil {
			return err
		}
		if id >= 0 {
			t.special[id] = true
		}
	}
	// Without a bos_token, a post-processor that starts with a special token
	// names it.
	if t.bos < 0 && cfg.BOS == nil && len(t.prefix) > 0 {
		t.bos = t.prefix[0]
	}
	// An explicit add_bos_token / add_eos_token overrides the post-processor
	// template, as transformers' Llama and Gemma tokenizers do.
	if cfg.AddBOS != nil {
		has := len(t.prefix) > 0 && t.bos >= 0 && t.prefix[0] == t.bos
		switch {
		case *cfg.AddBOS && !has && t.bos >= 0:
			t.prefix = append([]int{t.bos}, t.prefix...)
		case !*cfg.AddBOS && has:
			t.prefix = t.prefix[1:]
		case *cfg.AddBOS && t.bos < 0:
			return errors.New("add_bos_token is true but there is no bos_token")
		}
	}
	if cfg.AddEOS != nil {
		has := len(t.suffix) > 0 && eos >= 0 && t.suffix[len(t.suffix)-1] == eos
		switch {
		case *cfg.AddEOS && !has && eos >= 0:
			t.suffix = append(t.suffix, eos)
		case !*cfg.AddEOS && has:
			t.suffix = t.suffix[:len(t.suffix)-1]
		case *cfg.AddEOS && eos < 0:
			return errors.New("add_eos_token is true but there is no eos_token")
		}
	}
	return t.readChatTemplate(cfg.ChatTemplate)
}

// readChatTemplate accepts a template string or a list of named templates
// (the one named "default" is used, else the first).
func (t *Tokenizer) readChatTemplate(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, &t.chatTemplate); err == nil {
		return nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return errors.New("chat_template is neither a string nor a list of {name, template}")
	}
	for i, n := range named {
		if i == 0 || n.Name == "default" {
			t.chatTemplate = n.Template
		}
		if n.Name == "default" {
			break
		}
	}
	return nil
}
