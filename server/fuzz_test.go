package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/chat"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/toolcall"
)

// fullBackend takes no request: every request that gets as far as
// submitting is refused as a full queue, so a fuzz run spends its time
// on what comes before (decoding, validation, templates, formats).
type fullBackend struct{}

func (fullBackend) Submit(engine.Request) (*engine.Stream, error) { return nil, engine.ErrQueueFull }
func (fullBackend) Abort(string) bool                             { return false }
func (fullBackend) MaxModelLen() int                              { return 512 }

// FuzzRequests: whatever the body, every endpoint answers with a status
// of its own (a 4xx, or 429 from the full queue), never a 500 from a
// panic on the request path.
func FuzzRequests(f *testing.F) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		f.Fatal(err)
	}
	tmpl, err := chat.Parse(hermesTemplate)
	if err != nil {
		f.Fatal(err)
	}
	api := New(Options{Engine: fullBackend{}, Tokenizer: m.Tokenizer, ModelName: builtin.Name, ChatTemplate: tmpl,
		ToolSyntax: toolcall.Hermes, ReasoningParser: "qwen3", BOS: "<s>", EOS: "</s>"})
	h := api.Handler()
	for _, seed := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"stories260K","prompt":"hi","max_tokens":4,"stop":["x"],"logit_bias":{"5":3},"min_tokens":1}`},
		{"/v1/completions", `{"model":"stories260K","prompt":[1,2,3],"guided_regex":"[a-z]{2,3}\\d","n":2}`},
		{"/v1/completions", `{"model":"stories260K","prompt":[[1,2],[3]],"echo":true,"logprobs":1,"max_tokens":1,"prompt_logprobs":3,"stream":true}`},
		{"/v1/completions", `{"model":"stories260K","prompt":"a b c","allowed_token_ids":[5,6],"bad_words":["x y"],"truncate_prompt_tokens":2}`},
		{"/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"tools":` + testTools + `,"tool_choice":"required"}`},
		{"/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}]}`},
		{"/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"string","pattern":"^a+$"}}}}}}`},
		{"/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"structured_outputs":{"json":{"type":"object"},"disable_any_whitespace":true}}`},
		{"/v1/responses", `{"model":"stories260K","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","call_id":"c","name":"get_time","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"1"}],"tools":[{"type":"function","name":"get_time"}],"tool_choice":{"type":"function","name":"get_time"},"text":{"format":{"type":"json_object"}}}`},
		{"/tokenize", `{"messages":[{"role":"user","content":"hi"}],"return_token_strs":true}`},
		{"/detokenize", `{"tokens":[1,2,3]}`},
		{"/v1/embeddings", `{"model":"stories260K","input":["hi",[1,2]],"encoding_format":"base64","dimensions":4,"truncate_prompt_tokens":2}`},
		{"/v1/score", `{"model":"stories260K","text_1":"hi","text_2":["a",[1,2]],"truncate_prompt_tokens":2}`},
		{"/v1/rerank", `{"model":"stories260K","query":"hi","documents":["a","b"],"top_n":1,"return_documents":false}`},
		{"/v1/completions", `{"model":"stories260K","prompt":"hi","guided_grammar":"root ::= [a-z]+ (\",\" ws)?\nws ::= \" \"*"}`},
		{"/v1/completions", `{"model":"stories260K","prompt":["hi","a"],"use_beam_search":true,"n":3,"length_penalty":0.5,"echo":true}`},
		{"/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"use_beam_search":true,"n":2,"max_tokens":3}`},
		{"/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":" Once "}],"continue_final_message":true}`},
	} {
		f.Add(seed.path, seed.body)
	}
	f.Fuzz(func(t *testing.T, path, body string) {
		switch path {
		case "/v1/completions", "/v1/chat/completions", "/v1/responses", "/tokenize", "/detokenize", "/v1/embeddings", "/v1/score", "/v1/rerank":
		default:
			return
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		if w.Code >= 500 {
			t.Fatalf("%s %q: status %d: %s", path, body, w.Code, w.Body)
		}
	})
}
