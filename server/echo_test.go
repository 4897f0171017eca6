package server

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestEchoLogprobs sends lm-evaluation-harness's log-likelihood request
// (token ids, echo, logprobs 1, max_tokens 1, temperature 0) and checks
// each prompt token's log-probability against the one the model reports
// for it as an output: the prompt up to it, with the token forced by a
// logit bias (reported log-probabilities are the raw ones).
func TestEchoLogprobs(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	ids := ts.m.Tokenizer.Encode("Once upon a time, there was a little girl", true)
	idsJSON, _ := json.Marshal(ids)
	status, body := ts.post(t, "/v1/completions", fmt.Sprintf(`{"model":"stories260K","prompt":%s,"echo":true,"logprobs":1,"max_tokens":1,"temperature":0}`, idsJSON))
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var resp completionResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	lp := resp.Choices[0].Logprobs
	n := len(ids)
	if lp == nil || len(lp.Tokens) != n+1 || len(lp.TokenLogprobs) != n+1 || len(lp.TopLogprobs) != n+1 || len(lp.TextOffset) != n+1 {
		t.Fatalf("want %d entries (the prompt's and one output's): %s", n+1, body)
	}
	if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil || lp.TextOffset[0] != 0 || !strings.HasPrefix(resp.Choices[0].Text, ts.m.Tokenizer.Decode(ids, false)) {
		t.Fatalf("first token %q: logprob %v, top %v; text %q", lp.Tokens[0], lp.TokenLogprobs[0], lp.TopLogprobs[0], resp.Choices[0].Text)
	}
	for p := 1; p < n; p++ {
		if lp.TokenLogprobs[p] == nil || len(lp.TopLogprobs[p]) != 1 || lp.TextOffset[p] < lp.TextOffset[p-1] {
			t.Fatalf("prompt token %d: %s", p, body)
		}
		prefix, _ := json.Marshal(ids[:p])
		status, body := ts.post(t, "/v1/completions", fmt.Sprintf(`{"model":"stories260K","prompt":%s,"logprobs":0,"max_tokens":1,"temperature":0,"logit_bias":{"%d":100}}`, prefix, ids[p]))
		var one completionResponse
		if status != 200 || json.Unmarshal(body, &one) != nil {
			t.Fatalf("status %d: %s", status, body)
		}
		if got, want := *lp.TokenLogprobs[p], *one.Choices[0].Logprobs.TokenLogprobs[0]; math.Abs(got-want) > 1e-4 || lp.Tokens[p] != one.Choices[0].Logprobs.Tokens[0] {
			t.Fatalf("prompt token %d %q: echoed logprob %v, as an output %v (%q)", p, lp.Tokens[p], got, want, one.Choices[0].Logprobs.Tokens[0])
		}
	}

	// Streamed: the first chunk carries the prompt's entries.
	events := ts.sseEvents(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","echo":true,"logprobs":0,"max_tokens":3,"temperature":0,"stream":true}`)
	first := events[0]["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)
	toks, lps := first["tokens"].([]any), first["token_logprobs"].([]any)
	if len(toks) != 5+1 || lps[0] != nil || lps[1] == nil {
		t.Fatalf("first streamed chunk's logprobs: %v", first)
	}
	offsets := 0
	for _, ev := range events {
		for _, c := range ev["choices"].([]any) {
			if l, ok := c.(map[string]any)["logprobs"].(map[string]any); ok {
				offsets += len(l["text_offset"].([]any))
			}
		}
	}
	if offsets != 5+3 {
		t.Fatalf("%d entries over the stream, want 8", offsets)
	}
}

// TestPromptLogprobsParam: vLLM's prompt_logprobs on completions (per
// choice) and chat (for the rendered prompt), with the token's own entry
// beside its position's top ones, and the value the echo path reports.
func TestPromptLogprobsParam(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	_, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","echo":true,"logprobs":0,"max_tokens":1,"temperature":0,"prompt_logprobs":2}`)
	var resp struct {
		Choices []struct {
			Logprobs       completionLogprobs                  `json:"logprobs"`
			PromptLogprobs []map[string]map[string]interface{} `json:"prompt_logprobs"`
		}
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	ids := ts.m.Tokenizer.Encode("Once upon a time", true)
	c := resp.Choices[0]
	if len(c.PromptLogprobs) != len(ids) || c.PromptLogprobs[0] != nil {
		t.Fatalf("prompt_logprobs: %s", body)
	}
	for p := 1; p < len(ids); p++ {
		e := c.PromptLogprobs[p]
		own, ok := e[fmt.Sprint(ids[p])]
		if !ok || len(e) < 2 || len(e) > 3 || own["rank"].(float64) < 1 || own["decoded_token"] != c.Logprobs.Tokens[p] ||
			math.Abs(own["logprob"].(float64)-*c.Logprobs.TokenLogprobs[p]) > 1e-6 || len(c.Logprobs.TopLogprobs[p]) != 0 {
			t.Fatalf("prompt token %d: %v; echo's %v %v", p, e, *c.Logprobs.TokenLogprobs[p], c.Logprobs.TopLogprobs[p])
		}
	}
	status, body := ts.post(t, "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":2,"prompt_logprobs":0}`)
	var chat struct {
		PromptLogprobs []map[string]any `json:"prompt_logprobs"`
		Usage          usage
	}
	if status != 200 || json.Unmarshal(body, &chat) != nil || len(chat.PromptLogprobs) != chat.Usage.PromptTokens || chat.PromptLogprobs[1] == nil || len(chat.PromptLogprobs[1]) != 1 {
		t.Fatalf("chat: %d %s", status, body)
	}
	if status, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"x","prompt_logprobs":21}`); status != 400 || !strings.Contains(string(body), "prompt_logprobs must be in [0, 20]") {
		t.Fatalf("out of range: %d %s", status, body)
	}
}
