package server

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestTokenFilters covers vLLM's allowed_token_ids, bad_words and
// truncate_prompt_tokens on completions.
func TestTokenFilters(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	tok := ts.m.Tokenizer
	complete := func(body string) completionResponse {
		t.Helper()
		status, out := ts.post(t, "/v1/completions", body)
		var resp completionResponse
		if status != 200 || json.Unmarshal(out, &resp) != nil {
			t.Fatalf("%s: status %d %s", body, status, out)
		}
		return resp
	}
	// allowed_token_ids: only those, sampled or greedy.
	allowed := []int{tok.Encode(" cat", false)[0], tok.Encode(" dog", false)[0], tok.Encode(" sun", false)[0]}
	ids, _ := json.Marshal(allowed)
	var texts []string
	for _, id := range allowed {
		texts = append(texts, tok.Decode([]int{id}, false))
	}
	for _, temp := range []string{"0", "1"} {
		resp := complete(fmt.Sprintf(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":12,"temperature":%s,"logprobs":0,"allowed_token_ids":%s}`, temp, ids))
		for _, got := range resp.Choices[0].Logprobs.Tokens {
			if !slices.Contains(texts, got) {
				t.Fatalf("temperature %s: token %q outside %q", temp, got, texts)
			}
		}
	}
	// bad_words: greedy text names Lily; with the word banned it does not.
	plain := complete(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":24,"temperature":0}`).Choices[0].Text
	banned := complete(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":24,"temperature":0,"bad_words":["Lily"]}`).Choices[0].Text
	if !strings.Contains(plain, "Lily") || strings.Contains(banned, "Lily") {
		t.Fatalf("bad_words: %q, without %q", banned, plain)
	}
	// truncate_prompt_tokens: the prompt's last 3 tokens, as if sent alone.
	prompt := tok.Encode("Lily and Ben went to the park", true)
	full, _ := json.Marshal(prompt)
	last, _ := json.Marshal(prompt[len(prompt)-3:])
	cut := complete(fmt.Sprintf(`{"model":"stories260K","prompt":%s,"max_tokens":8,"temperature":0,"truncate_prompt_tokens":3,"echo":true}`, full))
	alone := complete(fmt.Sprintf(`{"model":"stories260K","prompt":%s,"max_tokens":8,"temperature":0,"echo":true}`, last))
	if cut.Usage.PromptTokens != 3 || cut.Choices[0].Text != alone.Choices[0].Text {
		t.Fatalf("truncated: %d prompt tokens, %q; the last 3 alone: %q", cut.Usage.PromptTokens, cut.Choices[0].Text, alone.Choices[0].Text)
	}
	for body, want := range map[string]string{
		`"allowed_token_ids":[]`:       "allowed_token_ids is empty",
		`"allowed_token_ids":[100000]`: "outside the vocabulary",
		`"bad_words":[" "]`:            "a bad word is empty",
		`"truncate_prompt_tokens":0`:   "truncate_prompt_tokens must be",
	} {
		status, out := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"hi",`+body+`}`)
		if status != 400 || !strings.Contains(string(out), want) {
			t.Errorf("%s: %d %s, want %q", body, status, out, want)
		}
	}
}

// TestTokensAsIDsAndContinuousUsage covers vLLM's
// return_tokens_as_token_ids (completions and chat log-probabilities)
// and stream_options.continuous_usage_stats.
func TestTokensAsIDsAndContinuousUsage(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	asID := regexp.MustCompile(`^token_id:\d+$`)
	status, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","max_tokens":4,"temperature":0,"logprobs":2,"echo":true,"return_tokens_as_token_ids":true}`)
	var resp completionResponse
	if status != 200 || json.Unmarshal(body, &resp) != nil {
		t.Fatalf("%d %s", status, body)
	}
	lp := resp.Choices[0].Logprobs
	for i, tok := range lp.Tokens {
		if !asID.MatchString(tok) || i > 0 && lp.TextOffset[i] < lp.TextOffset[i-1] {
			t.Fatalf("token %d %q, offsets %v", i, tok, lp.TextOffset)
		}
		for k := range lp.TopLogprobs[i] {
			if !asID.MatchString(k) {
				t.Fatalf("top key %q", k)
			}
		}
	}
	status, body = ts.post(t, "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"logprobs":true,"top_logprobs":1,"return_tokens_as_token_ids":true}`)
	if status != 200 || !regexp.MustCompile(`"token":"token_id:\d+"`).Match(body) || strings.Contains(string(body), `"token":"token_id:"`) {
		t.Fatalf("chat: %d %s", status, body)
	}
	events := ts.sseEvents(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","max_tokens":5,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`)
	last := 0
	for _, ev := range events {
		u, ok := ev["usage"].(map[string]any)
		if !ok {
			t.Fatalf("a chunk without usage: %v", ev)
		}
		if len(ev["choices"].([]any)) == 0 {
			continue // the final usage chunk
		}
		n := int(u["completion_tokens"].(float64))
		if u["prompt_tokens"].(float64) != 5 || n < last || u["total_tokens"].(float64) != float64(5+n) {
			t.Fatalf("usage %v after %d tokens", u, last)
		}
		last = n
	}
	if last != 5 {
		t.Fatalf("the last chunk's usage counts %d tokens, want 5", last)
	}
}
