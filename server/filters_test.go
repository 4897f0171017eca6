package server

import (
	"encoding/json"
	"fmt"
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
