package server

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestScore: /score and /v1/score give each pair the cosine similarity of
// the two texts' last-token hidden states, one text_1 against every
// text_2 or pairwise, with the inputs' usage; bad requests get a 400
// naming the field.
func TestScore(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	tok := ts.m.Tokenizer
	_, hiddenIDs := referenceHidden(t, ts)
	hidden := func(text string) []float32 { return hiddenIDs(tok.Encode(text, true)) }
	texts := []string{"Once upon a time", "The cat sat on the mat.", "Lily loved to play outside in the park.", "Once upon a time"}
	cos := func(a, b string) float64 {
		x, y := hidden(a), hidden(b)
		var xy, xx, yy float64
		for i := range x {
			xy += float64(x[i]) * float64(y[i])
			xx += float64(x[i]) * float64(x[i])
			yy += float64(y[i]) * float64(y[i])
		}
		return xy / math.Sqrt(xx*yy)
	}
	tokens := func(ss ...string) int {
		n := 0
		for _, s := range ss {
			n += len(tok.Encode(s, true))
		}
		return n
	}
	post := func(path, body string) (int, scoreResponse, []byte) {
		status, data := ts.post(t, path, body)
		var resp scoreResponse
		_ = json.Unmarshal(data, &resp)
		return status, resp, data
	}
	check := func(what string, resp scoreResponse, want []float64) {
		t.Helper()
		if resp.Object != "list" || len(resp.Data) != len(want) {
			t.Fatalf("%s: %+v", what, resp)
		}
		for i, d := range resp.Data {
			if d.Index != i || d.Object != "score" || math.Abs(d.Score-want[i]) > 1e-6 {
				t.Fatalf("%s: data %d is %+v, want score %.9f", what, i, d, want[i])
			}
		}
	}
	// One to many: text_1 embedded once, scored against each text_2.
	status, resp, data := post("/score", `{"model":"stories260K","text_1":"Once upon a time","text_2":["The cat sat on the mat.","Lily loved to play outside in the park.","Once upon a time"]}`)
	if status != 200 || resp.Usage.PromptTokens != tokens(texts...) || resp.Usage.TotalTokens != resp.Usage.PromptTokens {
		t.Fatalf("one to many: %d %s", status, data)
	}
	check("one to many", resp, []float64{cos(texts[0], texts[1]), cos(texts[0], texts[2]), 1})
	if d := resp.Data; d[0].Score == d[1].Score {
		t.Fatalf("different texts scored alike: %+v", d)
	}
	// Pairwise, on the /v1 path.
	status, resp, data = post("/v1/score", `{"model":"stories260K","text_1":["Once upon a time","The cat sat on the mat."],"text_2":["Lily loved to play outside in the park.","The cat sat on the mat."]}`)
	if status != 200 {
		t.Fatalf("pairwise: %d %s", status, data)
	}
	check("pairwise", resp, []float64{cos(texts[0], texts[2]), 1})

	long := `"` + strings.Repeat("cat ", 600) + `"`
	for body, param := range map[string]string{
		`{"model":"stories260K","text_1":["a","b"],"text_2":["c","d","e"]}`:             "text_2",
		`{"model":"stories260K","text_2":"c"}`:                                          "text_1",
		`{"model":"stories260K","text_1":"a"}`:                                          "text_2",
		`{"model":"stories260K","text_1":"a","text_2":[]}`:                              "text_2",
		`{"model":"stories260K","text_1":"a","text_2":["b",` + long + `]}`:              "text_2",
		`{"model":"stories260K","text_1":"a","text_2":"b","truncate_prompt_tokens":-5}`: "truncate_prompt_tokens",
		`{"text_1":"a","text_2":"b"}`:                                                   "model",
	} {
		status, _, data := post("/score", body)
		var e struct{ Error struct{ Param string } }
		if json.Unmarshal(data, &e) != nil || status != 400 || e.Error.Param != param {
			t.Errorf("%s: %d %s, want a 400 naming %s", body, status, data, param)
		}
	}
	if status, _, _ := post("/score", `{"model":"other","text_1":"a","text_2":"b"}`); status != 404 {
		t.Errorf("unknown model: %d", status)
	}
}

// TestRerank: /rerank, /v1/rerank and /v2/rerank order the documents by
// their score against the query, best first, with their index and text,
// the first top_n of them; bad requests get a 400 naming the field.
func TestRerank(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	_, hiddenIDs := referenceHidden(t, ts)
	hidden := func(text string) []float32 { return hiddenIDs(ts.m.Tokenizer.Encode(text, true)) }
	query := "Once upon a time"
	docs := []string{"The cat sat on the mat.", "Once upon a time", "Lily loved to play outside in the park.", "The dog ran."}
	q := hidden(query)
	want := make([]float64, len(docs))
	for i, d := range docs {
		want[i] = cosine(q, hidden(d))
	}
	post := func(path, body string) (int, rerankResponse, []byte) {
		status, data := ts.post(t, path, body)
		var resp rerankResponse
		_ = json.Unmarshal(data, &resp)
		return status, resp, data
	}
	body, _ := json.Marshal(map[string]any{"model": "stories260K", "query": query, "documents": docs})
	for _, path := range []string{"/rerank", "/v1/rerank", "/v2/rerank"} {
		status, resp, data := post(path, string(body))
		if status != 200 || len(resp.Results) != len(docs) || resp.Model != "stories260K" || resp.Usage.TotalTokens == 0 {
			t.Fatalf("%s: %d %s", path, status, data)
		}
		seen := map[int]bool{}
		for k, r := range resp.Results {
			if seen[r.Index] || r.Document == nil || r.Document.Text != docs[r.Index] || math.Abs(r.RelevanceScore-want[r.Index]) > 1e-6 {
				t.Fatalf("%s: result %d is %+v (want the score %.9f of document %d)", path, k, r, want[r.Index], r.Index)
			}
			seen[r.Index] = true
			if k > 0 && r.RelevanceScore > resp.Results[k-1].RelevanceScore {
				t.Fatalf("%s: results out of order: %+v", path, resp.Results)
			}
		}
		if resp.Results[0].Index != 1 || math.Abs(resp.Results[0].RelevanceScore-1) > 1e-6 {
			t.Fatalf("%s: the query's own text is not first with score 1: %+v", path, resp.Results[0])
		}
	}
	// Jina's document objects score as their text.
	status, resp, data := post("/v1/rerank", `{"model":"stories260K","query":"Once upon a time","documents":[{"text":"The dog ran."},"Once upon a time"]}`)
	if status != 200 || len(resp.Results) != 2 || resp.Results[0].Index != 1 || resp.Results[1].Document.Text != "The dog ran." || math.Abs(resp.Results[1].RelevanceScore-want[3]) > 1e-6 {
		t.Fatalf("document objects: %d %s", status, data)
	}
	body, _ = json.Marshal(map[string]any{"model": "stories260K", "query": query, "documents": docs, "top_n": 2, "return_documents": false})
	status, resp, data = post("/v1/rerank", string(body))
	if status != 200 || len(resp.Results) != 2 || resp.Results[0].Document != nil {
		t.Fatalf("top_n 2 without documents: %d %s", status, data)
	}
	long := strings.Repeat("cat ", 600)
	for body, param := range map[string]string{
		`{"model":"stories260K","query":"a","documents":[]}`:                   "documents",
		`{"model":"stories260K","query":"a","documents":["b",""]}`:             "documents",
		`{"model":"stories260K","query":"a","documents":["b","` + long + `"]}`: "documents",
		`{"model":"stories260K","query":"` + long + `","documents":["b"]}`:     "query",
		`{"model":"stories260K","documents":["b"]}`:                            "query",
		`{"model":"stories260K","query":7,"documents":["b"]}`:                  "query",
		`{"model":"stories260K","query":"a","documents":["b"],"top_n":-1}`:     "top_n",
		`{"query":"a","documents":["b"]}`:                                      "model",
	} {
		status, data := ts.post(t, "/rerank", body)
		var e struct{ Error struct{ Param string } }
		if json.Unmarshal(data, &e) != nil || status != 400 || e.Error.Param != param {
			t.Errorf("%s: %d %s, want a 400 naming %s", body, status, data, param)
		}
	}
	if status, _ := ts.post(t, "/rerank", `{"model":"other","query":"a","documents":["b"]}`); status != 404 {
		t.Errorf("unknown model: %d", status)
	}
}
