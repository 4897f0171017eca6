package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// TestEmbeddings: /v1/embeddings returns each input's last-token hidden
// state, L2-normalized (or raw with normalize false, cut to dimensions
// first), as floats or base64, with the inputs' usage; bad requests get
// a 400 naming the field.
func TestEmbeddings(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	tok := ts.m.Tokenizer
	ref, hiddenIDs := referenceHidden(t, ts)
	hidden := func(text string) []float32 { return hiddenIDs(tok.Encode(text, true)) }
	inputs := []string{"Once upon a time", "The cat sat on the mat and looked at the dog."}
	want := [][]float32{hidden(inputs[0]), hidden(inputs[1])}
	post := func(body string) (int, embeddingResponse, []byte) {
		status, data := ts.post(t, "/v1/embeddings", body)
		var resp embeddingResponse
		_ = json.Unmarshal(data, &resp)
		return status, resp, data
	}
	floats := func(v any) []float32 {
		var out []float32
		switch v := v.(type) {
		case []any:
			for _, x := range v {
				out = append(out, float32(x.(float64)))
			}
		case string:
			raw, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+4 <= len(raw); i += 4 {
				out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
			}
		}
		return out
	}
	check := func(what string, got []float32, want []float32, normalize bool) {
		t.Helper()
		w := append([]float32(nil), want...)
		if normalize {
			normalizeL2(w)
		}
		if len(got) != len(w) {
			t.Fatalf("%s: %d values, want %d", what, len(got), len(w))
		}
		for i := range w {
			if math.Abs(float64(got[i]-w[i])) > 1e-6*math.Max(1, math.Abs(float64(w[i]))) {
				t.Fatalf("%s: value %d is %g, want %g", what, i, got[i], w[i])
			}
		}
	}
	status, resp, data := post(`{"model":"stories260K","input":["Once upon a time","The cat sat on the mat and looked at the dog."]}`)
	if status != 200 || resp.Object != "list" || len(resp.Data) != 2 || resp.Usage.PromptTokens != len(tok.Encode(inputs[0], true))+len(tok.Encode(inputs[1], true)) || resp.Usage.CompletionTokens != 0 {
		t.Fatalf("status %d: %s", status, data)
	}
	for i, d := range resp.Data {
		if d.Index != i || d.Object != "embedding" {
			t.Fatalf("data %d: %+v", i, d)
		}
		v := floats(d.Embedding)
		check("float", v, want[i], true)
		n := 0.0
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		if math.Abs(n-1) > 1e-5 {
			t.Fatalf("input %d: squared norm %g, want 1", i, n)
		}
	}
	_, resp, _ = post(`{"model":"stories260K","input":"Once upon a time","encoding_format":"base64","normalize":false}`)
	check("base64, raw", floats(resp.Data[0].Embedding), want[0], false)
	_, resp, _ = post(`{"model":"stories260K","input":"Once upon a time","dimensions":8}`)
	check("dimensions 8", floats(resp.Data[0].Embedding), want[0][:8], true)
	ids, _ := json.Marshal(tok.Encode(inputs[1], true))
	_, resp, _ = post(`{"model":"stories260K","input":[` + string(ids) + `]}`)
	check("token ids", floats(resp.Data[0].Embedding), want[1], true)

	// Chat messages: the template's text, tokenized as /tokenize renders
	// it (no generation prompt, no special tokens beyond the template's),
	// embedded as one input.
	msgs := `[{"role":"system","content":"Be brief."},{"role":"user","content":"Once upon a time"}]`
	_, tokData := ts.post(t, "/tokenize", `{"messages":`+msgs+`,"add_generation_prompt":false}`)
	var rendered tokenizeResponse
	if err := json.Unmarshal(tokData, &rendered); err != nil || rendered.Count == 0 {
		t.Fatalf("tokenize: %s", tokData)
	}
	status, resp, data = post(`{"model":"stories260K","messages":` + msgs + `}`)
	if status != 200 || len(resp.Data) != 1 || resp.Usage.PromptTokens != rendered.Count {
		t.Fatalf("messages: %d %s (want %d prompt tokens)", status, data, rendered.Count)
	}
	check("messages", floats(resp.Data[0].Embedding), hiddenIDs(rendered.Tokens), true)
	_, withGen := ts.post(t, "/tokenize", `{"messages":`+msgs+`}`)
	if err := json.Unmarshal(withGen, &rendered); err != nil {
		t.Fatal(err)
	}
	_, resp, _ = post(`{"model":"stories260K","messages":` + msgs + `,"add_generation_prompt":true}`)
	check("messages with the generation prompt", floats(resp.Data[0].Embedding), hiddenIDs(rendered.Tokens), true)
	// add_special_tokens false: an input without the BOS.
	_, resp, _ = post(`{"model":"stories260K","input":"Once upon a time","add_special_tokens":false}`)
	check("no BOS", floats(resp.Data[0].Embedding), hiddenIDs(tok.Encode(inputs[0], false)), true)

	long := `"` + strings.Repeat("cat ", 600) + `"`
	for body, param := range map[string]string{
		`{"model":"stories260K","input":"hi","messages":[{"role":"user","content":"hi"}]}`: "messages",
		`{"model":"stories260K","input":"hi","add_generation_prompt":true}`:                "messages",
		`{"model":"stories260K","messages":[{"role":"wizard","content":"hi"}]}`:            "messages",
		`{"model":"stories260K","input":"hi","encoding_format":"int8"}`:                    "encoding_format",
		`{"model":"stories260K","input":"hi","dimensions":0}`:                              "dimensions",
		`{"model":"stories260K","input":"hi","dimensions":100000}`:                         "dimensions",
		`{"model":"stories260K","input":""}`:                                               "input",
		`{"model":"stories260K"}`:                                                          "input",
		`{"model":"stories260K","input":[99999]}`:                                          "input",
		`{"model":"stories260K","input":` + long + `}`:                                     "input",
		`{"model":"stories260K","input":"hi","truncate_prompt_tokens":0}`:                  "truncate_prompt_tokens",
		`{"input":"hi"}`: "model",
		`{"model":"stories260K","input":"hi","temperature":1,"dimensions":-1}`: "dimensions",
	} {
		status, _, data := post(body)
		var e struct{ Error struct{ Param string } }
		if json.Unmarshal(data, &e) != nil || status != 400 || e.Error.Param != param {
			t.Errorf("%s: %d %s, want a 400 naming %s", body, status, data, param)
		}
	}
	if status, _, _ := post(`{"model":"other","input":"hi"}`); status != 404 {
		t.Errorf("unknown model: %d", status)
	}
	// A long input cut to its last tokens embeds as those tokens alone.
	status, resp, data = post(`{"model":"stories260K","input":` + long + `,"truncate_prompt_tokens":5}`)
	lastFive := tok.Encode(strings.Repeat("cat ", 600), true)
	lastFive = lastFive[len(lastFive)-5:]
	b := &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: lastFive, Blocks: []int{0}, NumLogits: 1}}, Hidden: true}
	if _, err := ref.Step(context.Background(), b, parallel.Standard(parallel.Single)); err != nil {
		t.Fatal(err)
	}
	if status != 200 || resp.Usage.PromptTokens != 5 {
		t.Fatalf("truncated: %d %s", status, data)
	}
	check("truncated", floats(resp.Data[0].Embedding), ref.Hidden(), true)
}

// referenceHidden is a fresh CPU executor on the test server's model and
// a function giving, from one step on it, the hidden row of a prompt's
// last token (what the server embeds).
func referenceHidden(t *testing.T, ts *testServer) (*cpuexec.Executor, func(ids []int) []float32) {
	t.Helper()
	pool := tensor.NewPool(1)
	t.Cleanup(pool.Close)
	ref, err := cpuexec.NewExecutor(ts.m.Config, ts.m.Weights, cpuexec.Options{BlockSize: 16, NumBlocks: 8, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return ref, func(ids []int) []float32 {
		b := &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: ids, Blocks: []int{0, 1, 2, 3}, NumLogits: 1}}, Hidden: true}
		if _, err := ref.Step(context.Background(), b, parallel.Standard(parallel.Single)); err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), ref.Hidden()...)
	}
}

// noEmbeddings is a backend whose runner gives no hidden states.
type noEmbeddings struct{ fullBackend }

func (noEmbeddings) Submit(engine.Request) (*engine.Stream, error) {
	return nil, engine.ErrNoEmbeddings
}

// TestEmbeddingsRefused: a deployment whose runner gives no hidden states
// (CSPS, ranks in other processes) answers embeddings, score and rerank
// with a 400 naming model.
func TestEmbeddingsRefused(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{Engine: noEmbeddings{}, Tokenizer: m.Tokenizer, ModelName: builtin.Name}).Handler()
	for path, body := range map[string]string{
		"/v1/embeddings": `{"model":"stories260K","input":"hi"}`,
		"/v1/score":      `{"model":"stories260K","text_1":"hi","text_2":"ho"}`,
		"/v1/rerank":     `{"model":"stories260K","query":"hi","documents":["ho"]}`,
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		var e struct {
			Error struct{ Message, Param string }
		}
		if json.Unmarshal(w.Body.Bytes(), &e) != nil || w.Code != 400 || e.Error.Param != "model" || !strings.Contains(e.Error.Message, "serves no embeddings") {
			t.Errorf("%s: %d %s", path, w.Code, w.Body)
		}
	}
}
