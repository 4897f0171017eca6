package server

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"

	"github.com/gearboxlm/gearbox/engine"
)

// embeddingRequest is OpenAI's embeddings request, with vLLM's
// truncate_prompt_tokens and normalize.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
	Truncate       *int            `json:"truncate_prompt_tokens"`
	Normalize      *bool           `json:"normalize"`
	Priority       int             `json:"priority"`
}

var embeddingFields = knownFields("model", "input", "encoding_format", "dimensions", "user", "truncate_prompt_tokens", "normalize", "priority")

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
	if req.Model == "" {
		writeError(w, invalid("model", "model is required"))
		return
	}
	if req.Model != s.opts.ModelName {
		writeError(w, modelNotFound(req.Model))
		return
	}
	if s.opts.Tokenizer == nil {
		writeError(w, invalid("input", "embeddings need the model's tokenizer"))
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
	prompts, _, e := s.parsePrompt("input", req.Input)
	if e != nil {
		writeError(w, e)
		return
	}
	limit := s.opts.Engine.MaxModelLen()
	var jobs []*job
	fail := func(e *apiError) {
		for _, j := range jobs {
			s.opts.Engine.Abort(j.id)
		}
		writeError(w, e)
	}
	for i, ids := range prompts {
		ids = truncated(ids, keep, limit)
		prompts[i] = ids
		if len(ids) >= limit {
			fail(invalid("input", "This model's maximum context length is %d tokens. However, input %d has %d tokens. Please reduce the length of the input.", limit, i, len(ids)))
			return
		}
		id := s.newID("embd")
		st, err := s.opts.Engine.Submit(engine.Request{ID: id, Prompt: ids, Embed: true, Priority: req.Priority})
		if errors.Is(err, engine.ErrNoEmbeddings) {
			fail(invalid("model", "%s: this deployment serves no embeddings (%v)", req.Model, err))
			return
		}
		if err != nil {
			fail(submitError(err, "input"))
			return
		}
		jobs = append(jobs, &job{index: i, prompt: i, stream: st, id: id})
	}
	if e := s.collect(r.Context(), jobs); e != nil {
		writeError(w, e)
		return
	}
	resp := embeddingResponse{ID: s.newID("embd"), Object: "list", Created: s.opts.Clock.Now().Unix(), Model: req.Model}
	for _, j := range jobs {
		v := j.embedding
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
		resp.Data = append(resp.Data, embeddingData{Object: "embedding", Index: j.index, Embedding: out})
	}
	resp.Usage = totalUsage(jobs, prompts)
	writeJSON(w, http.StatusOK, resp)
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
