package server

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/internal/oracle"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
)

// oracleBeams is vLLM's beam search over the float64 oracle's
// log-probabilities, written out here apart from the server's: the width
// best of every beam's 2·width likeliest next tokens each step, beams
// ending with the end token set aside, then the best width of all by
// cumulative log-probability over the length (prompt included, the end
// token not) to the power penalty.
func oracleBeams(ref *oracle.Model, prompt []int, width, steps, eos int, penalty float64) [][]int {
	type hyp struct {
		tokens []int
		cum    float64
		ended  bool
	}
	score := func(h hyp) float64 {
		n := len(h.tokens)
		if h.ended {
			n--
		}
		return h.cum / math.Pow(float64(n), penalty)
	}
	sortByScore := func(hs []hyp) {
		sort.SliceStable(hs, func(i, j int) bool { return score(hs[i]) > score(hs[j]) })
	}
	live := []hyp{{tokens: slices.Clone(prompt)}}
	var done []hyp
	for range steps {
		var next []hyp
		for _, h := range live {
			logits := ref.Logits(h.tokens)
			last := logits[len(logits)-1]
			m := math.Inf(-1)
			for _, v := range last {
				m = math.Max(m, v)
			}
			sum := 0.0
			for _, v := range last {
				sum += math.Exp(v - m)
			}
			ids := make([]int, len(last))
			for i := range ids {
				ids[i] = i
			}
			sort.SliceStable(ids, func(a, b int) bool { return last[ids[a]] > last[ids[b]] })
			for _, id := range ids[:2*width] {
				nh := hyp{tokens: append(slices.Clip(h.tokens), id), cum: h.cum + last[id] - m - math.Log(sum)}
				if id == eos {
					nh.ended = true
					done = append(done, nh)
				} else {
					next = append(next, nh)
				}
			}
		}
		sortByScore(next)
		live = next[:min(width, len(next))]
	}
	all := append(done, live...)
	sortByScore(all)
	var out [][]int
	for _, h := range all[:width] {
		t := h.tokens[len(prompt):]
		if h.ended {
			t = t[:len(t)-1]
		}
		out = append(out, t)
	}
	return out
}

// TestBeamSearch: use_beam_search's choices are the oracle's beams, in
// order, for two length penalties and two prompts in one request, with
// finish reasons and usage; what beam search does not do is a 400. The
// server's end token is "." (the model rarely ends a story within a
// test's budget), so beams end, are set aside, and compete by their
// length-penalized scores.
func TestBeamSearch(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	dot := m.Tokenizer.Encode("Lily was happy.", false)
	eos := dot[len(dot)-1]
	ts := newTestServer(t, serverOpts{eos: []int{eos}})
	ref, err := oracle.Load("../model/builtin/stories260K")
	if err != nil {
		t.Fatal(err)
	}
	prompts := []string{"Once upon a time", "Tom and Sue played"}
	for _, penalty := range []float64{1, 0.5, 2} {
		status, body := ts.post(t, "/v1/completions", fmt.Sprintf(`{"model": "stories260K", "prompt": ["%s", "%s"], "n": 3, "max_tokens": 12, "use_beam_search": true, "length_penalty": %g}`,
			prompts[0], prompts[1], penalty))
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		var resp struct {
			Choices []struct {
				Index        int
				Text         string
				FinishReason string `json:"finish_reason"`
			}
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal(body, &resp); err != nil || len(resp.Choices) != 6 {
			t.Fatalf("%v: %s", err, body)
		}
		promptTokens := 0
		for p, text := range prompts {
			ids := m.Tokenizer.Encode(text, true)
			promptTokens += len(ids)
			want := oracleBeams(ref, ids, 3, 12, eos, penalty)
			for k, w := range want {
				ch := resp.Choices[3*p+k]
				if ch.Index != 3*p+k || ch.Text != m.Tokenizer.Decode(w, true) {
					t.Errorf("penalty %g, prompt %d, beam %d: %q, oracle %q", penalty, p, k, ch.Text, m.Tokenizer.Decode(w, true))
				}
				if want := map[bool]string{true: "length", false: "stop"}[len(w) == 12]; ch.FinishReason != want {
					t.Errorf("penalty %g, prompt %d, beam %d: finish %q, want %q", penalty, p, k, ch.FinishReason, want)
				}
			}
		}
		if resp.Usage.PromptTokens != promptTokens || resp.Usage.CompletionTokens < 6 {
			t.Errorf("usage %+v", resp.Usage)
		}
		stops := 0
		for _, ch := range resp.Choices {
			if ch.FinishReason == "stop" {
				stops++
			}
		}
		if stops == 0 {
			t.Errorf("penalty %g: no beam ended with the end token", penalty)
		}
	}
	for body, want := range map[string]string{
		`"n": 11`:              "at most 10",
		`"stream": true`:       "does not stream",
		`"logprobs": 2`:        "no log-probabilities",
		`"stop": ["x"]`:        "stop strings",
		`"guided_regex": "a+"`: "output format",
		`"min_tokens": 2`:      "min_tokens",
		`"length_penalty": 1, "use_beam_search": false`: "length_penalty is a parameter of beam search",
	} {
		full := `{"model": "stories260K", "prompt": "Once", "max_tokens": 4, "use_beam_search": true, ` + body + `}`
		if strings.Contains(body, "use_beam_search") {
			full = `{"model": "stories260K", "prompt": "Once", "max_tokens": 4, ` + body + `}`
		}
		if status, got := ts.post(t, "/v1/completions", full); status != 400 || !strings.Contains(string(got), want) {
			t.Errorf("%s: %d %s, want 400 %q", body, status, got, want)
		}
	}
	// Chat: the beams of the rendered prompt, as completions gives them
	// for its tokens.
	messages := `[{"role": "user", "content": "Tell me a story about a dog"}]`
	status, body := ts.post(t, "/tokenize", `{"model": "stories260K", "messages": `+messages+`}`)
	var tok struct{ Tokens []int }
	if err := json.Unmarshal(body, &tok); status != 200 || err != nil {
		t.Fatalf("tokenize: %d %s", status, body)
	}
	ids, _ := json.Marshal(tok.Tokens)
	status, body = ts.post(t, "/v1/completions", `{"model": "stories260K", "prompt": `+string(ids)+`, "n": 2, "max_tokens": 8, "use_beam_search": true}`)
	var comp struct{ Choices []struct{ Text string } }
	if err := json.Unmarshal(body, &comp); status != 200 || err != nil || len(comp.Choices) != 2 {
		t.Fatalf("completions: %d %s", status, body)
	}
	status, body = ts.post(t, "/v1/chat/completions", `{"model": "stories260K", "messages": `+messages+`, "n": 2, "max_tokens": 8, "use_beam_search": true}`)
	var chat struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	if err := json.Unmarshal(body, &chat); status != 200 || err != nil || len(chat.Choices) != 2 {
		t.Fatalf("chat: %d %s", status, body)
	}
	for k := range chat.Choices {
		if chat.Choices[k].Message.Content != comp.Choices[k].Text {
			t.Errorf("chat beam %d: %q, completions of its tokens %q", k, chat.Choices[k].Message.Content, comp.Choices[k].Text)
		}
	}
	if status, got := ts.post(t, "/v1/chat/completions", `{"model": "stories260K", "messages": `+messages+`, "use_beam_search": true, "stream": true}`); status != 400 || !strings.Contains(string(got), "does not stream") {
		t.Errorf("streamed chat beam search: %d %s", status, got)
	}
}
