package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"

	"github.com/gearboxlm/gearbox/engine"
)

// embeddingRequest is OpenAI's embeddings request, with vLLM's
// truncate_prompt_tokens, normalize and add_special_tokens, and vLLM's
// chat form: messages (instead of input) rendered with the chat template,
// by default without a generation prompt or special tokens beyond the
// template's.
type embeddingRequest struct {
	Model               string          `json:"model"`
	Input               json.RawMessage `json:"input"`
	Messages            []chatMessage   `json:"messages"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	ChatTemplateKwargs  map[string]any  `json:"chat_template_kwargs"`
	AddSpecialTokens    *bool           `json:"add_special_tokens"` // default: true for input, false for messages
	EncodingFormat      string          `json:"encoding_format"`
	Dimensions          *int            `json:"dimensions"`
	User                string          `json:"user"`
	Truncate            *int            `json:"truncate_prompt_tokens"`
	Normalize           *bool           `json:"normalize"`
	Priority            int             `json:"priority"`
}

var embeddingFields = knownFields("model", "input", "messages", "add_generation_prompt", "chat_template_kwargs", "add_special_tokens",
	"encoding_format", "dimensions", "user", "truncate_prompt_tokens", "normalize", "priority")

type embeddingData struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string of little-endian float32s
}

type embeddingResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []embeddingData `json:"data"`
	Usage   usage           `json:"usage"`
}

// embeddings serves POST /v1/embeddings: each input's embedding is the
// final-norm hidden state of its last token (last-token pooling, as
// decoder embedding models such as Qwen3-Embedding and e5-mistral are
// pooled), L2-normalized unless normalize is false; dimensions keeps the
// first that many values (Matryoshka models) before normalizing.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request, body []byte) {
	var req embeddingRequest
	if e := s.decode(body, &req, embeddingFields); e != nil {
		writeError(w, e)
		return
	}
	adapter, e := s.embeddingModel(req.Model)
	if e != nil {
		writeError(w, e)
		return
	}
	if f := req.EncodingFormat; f != "" && f != "float" && f != "base64" {
		writeError(w, invalid("encoding_format", `encoding_format must be "float" or "base64", got %q`, f))
		return
	}
	if req.Dimensions != nil && *req.Dimensions < 1 {
		writeError(w, invalid("dimensions", "dimensions must be at least 1, got %d", *req.Dimensions))
		return
	}
	keep, e := truncation(req.Truncate)
	if e != nil {
		writeError(w, e)
		return
	}
	prompts, e := s.embeddingPrompts(&req)
	if e != nil {
		writeError(w, e)
		return
	}
	vecs, u, e := s.embed(r.Context(), func(i int) (string, int) { return "input", i }, prompts, keep, req.Priority, adapter)
	if e != nil {
		writeError(w, e)
		return
	}
	resp := embeddingResponse{ID: s.newID("embd"), Object: "list", Created: s.opts.Clock.Now().Unix(), Model: req.Model, Usage: u}
	for i, v := range vecs {
		if d := req.Dimensions; d != nil {
			if *d > len(v) {
				writeError(w, invalid("dimensions", "dimensions must be at most the model's hidden size, %d; got %d", len(v), *d))
				return
			}
			v = v[:*d]
		}
		if req.Normalize == nil || *req.Normalize {
			normalizeL2(v)
		}
		var out any = v
		if req.EncodingFormat == "base64" {
			buf := make([]byte, 4*len(v))
			for i, x := range v {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
			}
			out = base64.StdEncoding.EncodeToString(buf)
		}
		resp.Data = append(resp.Data, embeddingData{Object: "embedding", Index: i, Embedding: out})
	}
	writeJSON(w, http.StatusOK, resp)
}

// embeddingPrompts are the token ids of req's input, or of its messages
// rendered with the chat template as one text.
func (s *Server) embeddingPrompts(req *embeddingRequest) ([][]int, *apiError) {
	if req.Messages == nil {
		if req.AddGenerationPrompt != nil || req.ChatTemplateKwargs != nil {
			return nil, invalid("messages", "add_generation_prompt and chat_template_kwargs apply to messages; this request sends input")
		}
		prompts, _, e := s.parsePrompt("input", req.Input, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
		return prompts, e
	}
	if len(req.Input) > 0 && string(req.Input) != "null" {
		return nil, invalid("messages", "send input or messages, not both")
	}
	addGen := req.AddGenerationPrompt != nil && *req.AddGenerationPrompt
	text, e := s.renderChat(req.Messages, nil, &addGen, false, req.ChatTemplateKwargs)
	if e != nil {
		return nil, e
	}
	ids := s.opts.Tokenizer.Encode(text, req.AddSpecialTokens != nil && *req.AddSpecialTokens)
	if len(ids) == 0 {
		return nil, invalid("messages", "the messages render to no tokens")
	}
	return [][]int{ids}, nil
}

// embeddingModel checks that model names the served model or one of its
// LoRA adapters (returned: resolveModel) and that it can embed text (its
// tokenizer is loaded).
func (s *Server) embeddingModel(model string) (adapter int, e *apiError) {
	if model == "" {
		return 0, invalid("model", "model is required")
	}
	if adapter, e = s.resolveModel(model); e != nil {
		return 0, e
	}
	if s.opts.Tokenizer == nil {
		return 0, invalid("model", "%s: embeddings need the model's tokenizer", model)
	}
	return adapter, nil
}

// embed runs each prompt, cut to its last keep tokens
// (truncate_prompt_tokens), as an embedding request through the engine
// and returns their embeddings in order — the final-norm hidden state of
// the last token, not normalized — and the usage. field names prompt i's
// request field and its index there, for errors.
func (s *Server) embed(ctx context.Context, field func(i int) (string, int), prompts [][]int, keep, priority, adapter int) ([][]float32, usage, *apiError) {
	limit := s.opts.Engine.MaxModelLen()
	var jobs []*job
	fail := func(e *apiError) ([][]float32, usage, *apiError) {
		for _, j := range jobs {
			s.opts.Engine.Abort(j.id)
		}
		return nil, usage{}, e
	}
	for i, ids := range prompts {
		ids = truncated(ids, keep, limit)
		prompts[i] = ids
		param, at := field(i)
		if len(ids) >= limit {
			return fail(invalid(param, "This model's maximum context length is %d tokens. However, %s %d has %d tokens. Please reduce the length of the input.", limit, param, at, len(ids)))
		}
		id := s.newID("embd")
		st, err := s.opts.Engine.Submit(engine.Request{ID: id, Prompt: ids, Embed: true, Priority: priority, Adapter: adapter})
		if err != nil {
			return fail(submitError(err, param))
		}
		jobs = append(jobs, &job{index: i, prompt: i, stream: st, id: id})
	}
	if e := s.collect(ctx, jobs); e != nil {
		return nil, usage{}, e
	}
	vecs := make([][]float32, len(jobs))
	for i, j := range jobs {
		vecs[i] = j.embedding
	}
	return vecs, totalUsage(jobs, prompts), nil
}

// normalizeL2 scales v to unit length (a zero vector stays zero).
func normalizeL2(v []float32) {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		return
	}
	inv := 1 / math.Sqrt(sum)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
}
