package server

import (
	"cmp"
	"encoding/json"
	"math"
	"net/http"
	"slices"
)

// Scoring and reranking with the served model as a bi-encoder, as vLLM
// serves embedding models: a pair's score is the cosine similarity of
// the two texts' embeddings (embeddings.go: last-token pooling), each
// text embedded through the engine beside generations (a single text_1
// once for all its pairs).

// scoreRequest is vLLM's POST /score: text_1 against text_2, one to many
// (text_1 a single text) or pairwise (lists of one length).
type scoreRequest struct {
	Model    string          `json:"model"`
	Text1    json.RawMessage `json:"text_1"`
	Text2    json.RawMessage `json:"text_2"`
	Truncate *int            `json:"truncate_prompt_tokens"`
	User     string          `json:"user"`
	Priority int             `json:"priority"`
}

var scoreFields = knownFields("model", "text_1", "text_2", "truncate_prompt_tokens", "user", "priority")

type scoreData struct {
	Index  int     `json:"index"`
	Object string  `json:"object"`
	Score  float64 `json:"score"`
}

type scoreResponse struct {
	ID      string      `json:"id"`
	Object  string      `json:"object"`
	Created int64       `json:"created"`
	Model   string      `json:"model"`
	Data    []scoreData `json:"data"`
	Usage   usage       `json:"usage"`
}

// score serves POST /score and /v1/score.
func (s *Server) score(w http.ResponseWriter, r *http.Request, body []byte) {
	var req scoreRequest
	if e := s.decode(body, &req, scoreFields); e != nil {
		writeError(w, e)
		return
	}
	adapter, e := s.embeddingModel(req.Model)
	if e != nil {
		writeError(w, e)
		return
	}
	keep, e := truncation(req.Truncate)
	if e != nil {
		writeError(w, e)
		return
	}
	first, _, e := s.parsePrompt("text_1", req.Text1, true)
	if e != nil {
		writeError(w, e)
		return
	}
	second, _, e := s.parsePrompt("text_2", req.Text2, true)
	if e != nil {
		writeError(w, e)
		return
	}
	if len(first) != 1 && len(first) != len(second) {
		writeError(w, invalid("text_2", "text_1 holds %d texts and text_2 %d: text_1 must be one text (scored against each of text_2) or as many as text_2 (scored pairwise)", len(first), len(second)))
		return
	}
	field := func(i int) (string, int) {
		if i < len(first) {
			return "text_1", i
		}
		return "text_2", i - len(first)
	}
	vecs, u, e := s.embed(r.Context(), field, append(first, second...), keep, req.Priority, adapter)
	if e != nil {
		writeError(w, e)
		return
	}
	resp := scoreResponse{ID: s.newID("score"), Object: "list", Created: s.opts.Clock.Now().Unix(), Model: req.Model, Usage: u}
	for i := range second {
		a := vecs[min(i, len(first)-1)]
		resp.Data = append(resp.Data, scoreData{Index: i, Object: "score", Score: cosine(a, vecs[len(first)+i])})
	}
	writeJSON(w, http.StatusOK, resp)
}

// rerankRequest is the rerank request of Jina's and Cohere's APIs as vLLM
// serves it (POST /rerank, /v1/rerank, /v2/rerank).
type rerankRequest struct {
	Model           string            `json:"model"`
	Query           json.RawMessage   `json:"query"`
	Documents       []json.RawMessage `json:"documents"` // strings, or Jina's {"text": ...}
	TopN            int               `json:"top_n"`
	ReturnDocuments *bool             `json:"return_documents"`
	Truncate        *int              `json:"truncate_prompt_tokens"`
	User            string            `json:"user"`
	Priority        int               `json:"priority"`
}

var rerankFields = knownFields("model", "query", "documents", "top_n", "return_documents", "truncate_prompt_tokens", "user", "priority")

type rerankDocument struct {
	Text string `json:"text"`
}

type rerankResult struct {
	Index          int             `json:"index"`
	Document       *rerankDocument `json:"document,omitempty"`
	RelevanceScore float64         `json:"relevance_score"`
}

type rerankUsage struct {
	TotalTokens int `json:"total_tokens"`
}

type rerankResponse struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Usage   rerankUsage    `json:"usage"`
	Results []rerankResult `json:"results"`
}

// rerank serves POST /rerank, /v1/rerank and /v2/rerank: the documents
// by their score against the query, best first (ties in document order),
// the first top_n of them when top_n is positive.
func (s *Server) rerank(w http.ResponseWriter, r *http.Request, body []byte) {
	var req rerankRequest
	if e := s.decode(body, &req, rerankFields); e != nil {
		writeError(w, e)
		return
	}
	adapter, e := s.embeddingModel(req.Model)
	if e != nil {
		writeError(w, e)
		return
	}
	if req.TopN < 0 {
		writeError(w, invalid("top_n", "top_n must be at least 0 (0: every document), got %d", req.TopN))
		return
	}
	keep, e := truncation(req.Truncate)
	if e != nil {
		writeError(w, e)
		return
	}
	var query string
	if json.Unmarshal(req.Query, &query) != nil || query == "" {
		writeError(w, invalid("query", "query must be a non-empty string"))
		return
	}
	if len(req.Documents) == 0 {
		writeError(w, invalid("documents", "documents must hold at least one text"))
		return
	}
	prompts := [][]int{s.opts.Tokenizer.Encode(query, true)}
	docs := make([]string, len(req.Documents))
	for i, raw := range req.Documents {
		var obj struct {
			Text *string `json:"text"`
		}
		if json.Unmarshal(raw, &docs[i]) != nil && (json.Unmarshal(raw, &obj) != nil || obj.Text == nil) {
			writeError(w, invalid("documents", `document %d must be a string or {"text": "..."}`, i))
			return
		}
		if obj.Text != nil {
			docs[i] = *obj.Text
		}
		if docs[i] == "" {
			writeError(w, invalid("documents", "document %d is empty", i))
			return
		}
		prompts = append(prompts, s.opts.Tokenizer.Encode(docs[i], true))
	}
	field := func(i int) (string, int) {
		if i == 0 {
			return "query", 0
		}
		return "documents", i - 1
	}
	vecs, u, e := s.embed(r.Context(), field, prompts, keep, req.Priority, adapter)
	if e != nil {
		writeError(w, e)
		return
	}
	resp := rerankResponse{ID: s.newID("rerank"), Model: req.Model, Usage: rerankUsage{TotalTokens: u.TotalTokens}}
	for i, d := range docs {
		res := rerankResult{Index: i, RelevanceScore: cosine(vecs[0], vecs[1+i])}
		if req.ReturnDocuments == nil || *req.ReturnDocuments {
			res.Document = &rerankDocument{Text: d}
		}
		resp.Results = append(resp.Results, res)
	}
	slices.SortStableFunc(resp.Results, func(a, b rerankResult) int { return cmp.Compare(b.RelevanceScore, a.RelevanceScore) })
	if req.TopN > 0 && req.TopN < len(resp.Results) {
		resp.Results = resp.Results[:req.TopN]
	}
	writeJSON(w, http.StatusOK, resp)
}

// cosine is the cosine similarity of a and b (0 when either is zero).
func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		ab += x * y
		aa += x * x
		bb += y * y
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}
