package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestTokenizeDetokenize(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	tok := ts.m.Tokenizer
	var resp tokenizeResponse
	status, body := ts.post(t, "/tokenize", `{"model":"stories260K","prompt":"Once upon a time","return_token_strs":true}`)
	want := tok.Encode("Once upon a time", true)
	if status != 200 || json.Unmarshal(body, &resp) != nil || !slices.Equal(resp.Tokens, want) || resp.Count != len(want) || resp.MaxModelLen != 512 ||
		len(resp.TokenStrs) != len(want) || resp.TokenStrs[0] != tok.Token(want[0]) {
		t.Fatalf("tokenize: status %d: %s (want %v)", status, body, want)
	}
	// add_special_tokens false leaves out BOS; the model field is optional.
	status, body = ts.post(t, "/tokenize", `{"prompt":"Once upon a time","add_special_tokens":false}`)
	plain := tok.Encode("Once upon a time", false)
	if status != 200 || json.Unmarshal(body, &resp) != nil || !slices.Equal(resp.Tokens, plain) || resp.TokenStrs != nil || len(plain) != len(want)-1 {
		t.Fatalf("tokenize without special tokens: status %d: %s (want %v)", status, body, plain)
	}
	// Messages render as chat renders them: the same prompt tokens.
	msgs := `"messages":[{"role":"user","content":"Once upon a time"}]`
	status, body = ts.post(t, "/tokenize", `{`+msgs+`}`)
	var chat chatResponse
	_, chatBody := ts.post(t, "/v1/chat/completions", `{"model":"stories260K",`+msgs+`,"max_tokens":1}`)
	if status != 200 || json.Unmarshal(body, &resp) != nil || json.Unmarshal(chatBody, &chat) != nil || resp.Count != chat.Usage.PromptTokens {
		t.Fatalf("tokenize messages: %s; chat: %s", body, chatBody)
	}
	status, body = ts.post(t, "/detokenize", `{"model":"stories260K","tokens":`+mustJSON(plain)+`}`)
	var de map[string]string
	if status != 200 || json.Unmarshal(body, &de) != nil || de["prompt"] != "Once upon a time" {
		t.Fatalf("detokenize: status %d: %s", status, body)
	}
	for _, c := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/tokenize", `{}`, 400, "prompt (a string) or messages is required"},
		{"/tokenize", `{"prompt":"a",` + msgs + `}`, 400, "not both"},
		{"/tokenize", `{"model":"gpt-9","prompt":"a"}`, 404, "gpt-9"},
		{"/tokenize", `{"prompt":5}`, 400, "prompt"},
		{"/tokenize", `{` + msgs + `,"tools":[{"type":"function"}]}`, 400, "tools[0]"},
		{"/detokenize", `{"tokens":[1,99999]}`, 400, "outside the vocabulary"},
		{"/detokenize", `{}`, 400, "tokens"},
		{"/detokenize", `{"tokens":"abc"}`, 400, "tokens"},
	} {
		status, body := ts.post(t, c.path, c.body)
		if status != c.status || !strings.Contains(string(body), c.want) {
			t.Errorf("%s %s: status %d %s, want %d with %q", c.path, c.body, status, body, c.status, c.want)
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
