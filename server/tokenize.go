package server

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/gearboxlm/gearbox/toolcall"
)

// tokenizeRequest is vLLM's POST /tokenize: a prompt, or chat messages
// rendered with the chat template as /v1/chat/completions renders them.
type tokenizeRequest struct {
	Model                string          `json:"model"` // optional; when set, the served model's name
	Prompt               *string         `json:"prompt"`
	Messages             []chatMessage   `json:"messages"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"` // default: true for a prompt, false for messages (the template writes them)
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	ChatTemplateKwargs   map[string]any  `json:"chat_template_kwargs"`
	Documents            json.RawMessage `json:"documents"`
	Tools                json.RawMessage `json:"tools"`
	ReturnTokenStrs      bool            `json:"return_token_strs"`
}

var tokenizeFields = knownFields("model", "prompt", "messages", "add_special_tokens", "add_generation_prompt", "continue_final_message", "chat_template_kwargs", "documents", "tools", "return_token_strs")

type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int    `json:"tokens"`
	TokenStrs   []string `json:"token_strs"` // the vocabulary's strings, with return_token_strs; else null
}

// tokenize serves POST /tokenize.
func (s *Server) tokenize(w http.ResponseWriter, _ *http.Request, body []byte) {
	var req tokenizeRequest
	if e := s.decode(body, &req, tokenizeFields); e != nil {
		writeError(w, e)
		return
	}
	if e := s.checkModel(req.Model); e != nil {
		writeError(w, e)
		return
	}
	var text string
	special := req.Prompt != nil
	switch {
	case req.Prompt != nil && req.Messages != nil:
		writeError(w, invalid("messages", "send prompt or messages, not both"))
		return
	case req.Prompt != nil:
		text = *req.Prompt
	case req.Messages != nil:
		functions, err := toolcall.ParseTools(req.Tools)
		if err != nil {
			writeError(w, invalid("tools", "%v", err))
			return
		}
		var tools json.RawMessage
		if len(functions) > 0 {
			tools = req.Tools
		}
		kwargs, e := withDocuments(req.ChatTemplateKwargs, req.Documents)
		if e != nil {
			writeError(w, e)
			return
		}
		if text, e = s.renderChat(req.Messages, tools, req.AddGenerationPrompt, req.ContinueFinalMessage, kwargs); e != nil {
			writeError(w, e)
			return
		}
	default:
		writeError(w, invalid("prompt", "prompt (a string) or messages is required"))
		return
	}
	if req.AddSpecialTokens != nil {
		special = *req.AddSpecialTokens
	}
	tok := s.opts.Tokenizer
	resp := tokenizeResponse{Tokens: tok.Encode(text, special), MaxModelLen: s.opts.Engine.MaxModelLen()}
	resp.Count = len(resp.Tokens)
	if req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(resp.Tokens))
		for i, id := range resp.Tokens {
			resp.TokenStrs[i] = tok.Token(id)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

type detokenizeRequest struct {
	Model  string `json:"model"`
	Tokens []int  `json:"tokens"`
}

var detokenizeFields = knownFields("model", "tokens")

// detokenize serves POST /detokenize: the text of token ids, special
// tokens included, as vLLM decodes them.
func (s *Server) detokenize(w http.ResponseWriter, _ *http.Request, body []byte) {
	var req detokenizeRequest
	if e := s.decode(body, &req, detokenizeFields); e != nil {
		writeError(w, e)
		return
	}
	if e := s.checkModel(req.Model); e != nil {
		writeError(w, e)
		return
	}
	if req.Tokens == nil {
		writeError(w, invalid("tokens", "tokens (a list of token ids) is required"))
		return
	}
	tok := s.opts.Tokenizer
	for i, id := range req.Tokens {
		if id < 0 || id >= tok.VocabSize() {
			writeError(w, invalid("tokens", "tokens[%d] = %d is outside the vocabulary [0, %d)", i, id, tok.VocabSize()))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": tok.Decode(req.Tokens, false)})
}

// checkModel accepts an absent model name (the tokenizer endpoints make
// it optional, as vLLM does) or the served one.
func (s *Server) checkModel(name string) *apiError {
	if name == "" {
		return nil
	}
	_, e := s.resolveModel(name)
	return e
}

// resolveModel maps a request's model to what runs it: 0 for the served
// model, a LoRA adapter's id for the adapter (Options.LoRA).
func (s *Server) resolveModel(name string) (int, *apiError) {
	if name == s.opts.ModelName || slices.Contains(s.opts.ModelAliases, name) {
		return 0, nil
	}
	if s.opts.LoRA != nil {
		if id, ok := s.opts.LoRA.Lookup(name); ok {
			return id, nil
		}
	}
	return 0, modelNotFound(name)
}
