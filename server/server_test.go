package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/chat"
	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/reasoning"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/slo"
	"github.com/gearboxlm/gearbox/tensor"
	"github.com/gearboxlm/gearbox/toolcall"
)

type testServer struct {
	*httptest.Server
	api     *Server
	eng     *engine.Engine
	metrics *Metrics
	m       *model.Model
}

type serverOpts struct {
	sched      sched.Config
	apiKey     string
	blocks     int
	noTemplate bool
	template   string // a chat template in place of the model's; its tool-call syntax is detected
	reasoning  reasoning.Parser
	compact    bool
	store      int // ResponsesStore
	tiers      *slo.Set
	health     func() error
	stepDelay  time.Duration // added to every step, to keep a request running
	eos        []int         // Options.EOSTokens in place of the model's
}

// slowExec is the CPU executor with every step taking delay longer.
type slowExec struct {
	*cpuexec.Executor
	delay time.Duration
}

func (x slowExec) Step(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]float32, error) {
	time.Sleep(x.delay)
	return x.Executor.Step(ctx, b, p)
}

// newTestServer serves the built-in model on a loopback httptest server.
func newTestServer(t testing.TB, o serverOpts) *testServer {
	t.Helper()
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(2)
	if o.blocks == 0 {
		o.blocks = 512
	}
	exec, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{BlockSize: 16, NumBlocks: o.blocks, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	metrics := NewMetrics("single", "static")
	if o.sched.MaxNumBatchedTokens == 0 {
		o.sched.MaxNumBatchedTokens = 512
	}
	o.sched.EnablePrefixCaching = true
	var runner engine.Runner = exec
	if o.stepDelay > 0 {
		runner = slowExec{exec, o.stepDelay}
	}
	eng, err := engine.NewEngine(engine.Options{Exec: runner, Tokenizer: m.Tokenizer, EOS: m.EOS(), Observer: metrics, Sched: o.sched})
	if err != nil {
		t.Fatal(err)
	}
	metrics.Watch(eng.Stats, exec.KVLayout())
	if o.tiers != nil {
		metrics.Tiers(o.tiers)
	}
	tmpl, err := chat.Parse(m.Tokenizer.ChatTemplate())
	if err != nil {
		t.Fatal(err)
	}
	if o.noTemplate {
		tmpl = nil
	}
	var syntax toolcall.Syntax
	if o.template != "" {
		if tmpl, err = chat.Parse(o.template); err != nil {
			t.Fatal(err)
		}
		syntax = toolcall.Detect(o.template)
	}
	api := New(Options{Engine: eng, Tokenizer: m.Tokenizer, ModelName: builtin.Name, ChatTemplate: tmpl, ToolSyntax: syntax, ReasoningParser: o.reasoning, CompactJSON: o.compact, ResponsesStore: o.store, BOS: "<s>", EOS: "</s>",
		APIKey: o.apiKey, MaxBodyBytes: 1 << 20, Metrics: metrics, Tiers: o.tiers, Health: o.health, EOSTokens: o.eos})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = eng.Run(ctx)
	}()
	hs := httptest.NewServer(api.Handler())
	t.Cleanup(func() {
		hs.Close()
		cancel()
		<-done
		pool.Close()
	})
	return &testServer{Server: hs, api: api, eng: eng, metrics: metrics, m: m}
}

func (ts *testServer) post(t testing.TB, path, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// sseEvents posts a streaming request and returns the JSON of every data
// line before [DONE].
func (ts *testServer) sseEvents(t *testing.T, path, body string) []map[string]any {
	t.Helper()
	resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: status %d %s", resp.StatusCode, data)
	}
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sawDone := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("bad SSE line %q", line)
		}
		if data == "[DONE]" {
			sawDone = true
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("bad event %q: %v", data, err)
		}
		out = append(out, ev)
	}
	if !sawDone {
		t.Fatal("stream ended without [DONE]")
	}
	return out
}

const storiesCompletion = ", there was a little girl named Lily. She loved to play"

func TestCompletionsStreamedAndNot(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	status, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","max_tokens":16,"temperature":0}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var resp completionResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Text != storiesCompletion || *resp.Choices[0].FinishReason != "length" {
		t.Fatalf("response %s", body)
	}
	promptLen := len(ts.m.Tokenizer.Encode("Once upon a time", true))
	if resp.Usage.PromptTokens != promptLen || resp.Usage.CompletionTokens != 16 || resp.Usage.TotalTokens != promptLen+16 || resp.Object != "text_completion" {
		t.Fatalf("usage %+v object %s", resp.Usage, resp.Object)
	}
	events := ts.sseEvents(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","max_tokens":16,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`)
	var text strings.Builder
	for _, ev := range events[:len(events)-1] {
		for _, c := range ev["choices"].([]any) {
			text.WriteString(c.(map[string]any)["text"].(string))
		}
	}
	if text.String() != storiesCompletion {
		t.Fatalf("streamed %q", text.String())
	}
	last := events[len(events)-1]
	if u := last["usage"].(map[string]any); u["completion_tokens"].(float64) != 16 || len(last["choices"].([]any)) != 0 {
		t.Fatalf("usage chunk %v", last)
	}
}

// TestLogitBias: a bias of +100 forces a token at every greedy step, and
// -100 on the greedy continuation's first token moves the choice away
// from it; the reported log-probabilities stay the model's.
func TestLogitBias(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	complete := func(extra string) completionResponse {
		t.Helper()
		status, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","max_tokens":4,"temperature":0,"logprobs":1`+extra+`}`)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		var resp completionResponse
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	tok := ts.m.Tokenizer
	ids := tok.Encode("the cat", false)
	forced := ids[len(ids)-1] // "at", a piece without a leading space
	resp := complete(fmt.Sprintf(`,"logit_bias":{"%d":100}`, forced))
	toks := resp.Choices[0].Logprobs.Tokens
	piece := toks[0]
	if len(toks) != 4 || piece != tok.Decode([]int{forced}, true) || strings.Repeat(piece, 4) != resp.Choices[0].Text {
		t.Fatalf("forced %d: text %q, tokens %q", forced, resp.Choices[0].Text, toks)
	}
	for _, lp := range resp.Choices[0].Logprobs.TokenLogprobs {
		if lp == nil || !(*lp < -0.5) {
			t.Errorf("a forced token's reported logprob %v: want the model's own, far below 0", lp)
		}
	}
	plain := complete("")
	first, ok := tok.TokenID(plain.Choices[0].Logprobs.Tokens[0])
	if !ok {
		t.Fatalf("no token for %q", plain.Choices[0].Logprobs.Tokens[0])
	}
	banned := complete(fmt.Sprintf(`,"logit_bias":{"%d":-100}`, first))
	if banned.Choices[0].Logprobs.Tokens[0] == plain.Choices[0].Logprobs.Tokens[0] {
		t.Fatalf("token %d banned, still chosen first: %q", first, banned.Choices[0].Text)
	}
}

// TestJSONObjectResponseFormat: with response_format json_object every
// choice is one JSON object and ends on the end token ("stop"), streamed
// or not, where the same request without it is not JSON at all. The tiny
// model keeps a dialogue going inside the object, so a bias on "}" lets
// it close within the test's budget; the mask decides where "}" may go.
func TestJSONObjectResponseFormat(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	tok := ts.m.Tokenizer
	closing := -1
	for id := range tok.VocabSize() {
		if tok.Piece(id) == "}" {
			closing = id
		}
	}
	req := fmt.Sprintf(`{"model":"stories260K","messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":300,"temperature":1,"seed":2,"n":3,"logit_bias":{"%d":8}%%s}`, closing)
	format := `,"response_format":{"type":"json_object"}`
	var resp chatResponse
	status, body := ts.post(t, "/v1/chat/completions", fmt.Sprintf(req, format))
	if status != 200 || json.Unmarshal(body, &resp) != nil || len(resp.Choices) != 3 {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, c := range resp.Choices {
		var obj map[string]any
		if err := json.Unmarshal([]byte(*c.Message.Content), &obj); err != nil || *c.FinishReason != "stop" || len(obj) == 0 {
			t.Errorf("choice %d (%s): %q is not a JSON object with a key: %v", c.Index, *c.FinishReason, *c.Message.Content, err)
		}
	}
	status, body = ts.post(t, "/v1/chat/completions", fmt.Sprintf(req, ""))
	if status != 200 || json.Unmarshal(body, &resp) != nil {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, c := range resp.Choices {
		if json.Valid([]byte(*c.Message.Content)) {
			t.Errorf("without response_format choice %d is JSON already: %q", c.Index, *c.Message.Content)
		}
	}
	events := ts.sseEvents(t, "/v1/chat/completions", fmt.Sprintf(req, format+`,"stream":true`))
	texts := map[float64]*strings.Builder{}
	for _, ev := range events {
		for _, c := range ev["choices"].([]any) {
			c := c.(map[string]any)
			i := c["index"].(float64)
			if texts[i] == nil {
				texts[i] = &strings.Builder{}
			}
			if s, ok := c["delta"].(map[string]any)["content"].(string); ok {
				texts[i].WriteString(s)
			}
		}
	}
	for i, b := range texts {
		var obj map[string]any
		if err := json.Unmarshal([]byte(b.String()), &obj); err != nil {
			t.Errorf("streamed choice %v: %q: %v", i, b.String(), err)
		}
	}
	if len(texts) != 3 {
		t.Errorf("%d streamed choices", len(texts))
	}
	// /v1/completions takes response_format too, as vLLM does.
	status, body = ts.post(t, "/v1/completions", fmt.Sprintf(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":300,"temperature":0,"logit_bias":{"%d":8},"response_format":{"type":"json_object"}}`, closing))
	var comp completionResponse
	if status != 200 || json.Unmarshal(body, &comp) != nil {
		t.Fatalf("completions: status %d: %s", status, body)
	}
	var obj map[string]any
	if json.Unmarshal([]byte(comp.Choices[0].Text), &obj) != nil || *comp.Choices[0].FinishReason != "stop" {
		t.Errorf("completions: %q (%s) is not a JSON object", comp.Choices[0].Text, *comp.Choices[0].FinishReason)
	}
}

// TestJSONSchemaResponseFormat: with response_format json_schema every
// choice follows the schema: its keys in order, each value of its type,
// the enum's values only, bounded strings and arrays, and then the end
// token.
func TestJSONSchemaResponseFormat(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer"},` +
		`"mood":{"enum":["happy","sad"]},"friends":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":2}},` +
		`"required":["name","age","mood","friends"]}`
	status, body := ts.post(t, "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"Tell me about a cat"}],`+
		`"max_tokens":300,"temperature":1,"seed":1,"n":3,"response_format":{"type":"json_schema","json_schema":{"name":"cat","schema":`+schema+`}}}`)
	var resp chatResponse
	if status != 200 || json.Unmarshal(body, &resp) != nil || len(resp.Choices) != 3 {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, c := range resp.Choices {
		var cat struct {
			Name    *string  `json:"name"`
			Age     *int     `json:"age"`
			Mood    string   `json:"mood"`
			Friends []string `json:"friends"`
		}
		dec := json.NewDecoder(strings.NewReader(*c.Message.Content))
		dec.DisallowUnknownFields()
		err := dec.Decode(&cat)
		order := []int{strings.Index(*c.Message.Content, `"name"`), strings.Index(*c.Message.Content, `"age"`),
			strings.Index(*c.Message.Content, `"mood"`), strings.Index(*c.Message.Content, `"friends"`)}
		if err != nil || *c.FinishReason != "stop" || cat.Name == nil || len([]rune(*cat.Name)) > 12 || cat.Age == nil ||
			cat.Mood != "happy" && cat.Mood != "sad" || cat.Friends == nil || len(cat.Friends) > 2 || !slices.IsSorted(order) || order[0] < 0 {
			t.Errorf("choice %d (%s): %q does not follow the schema: %v", c.Index, *c.FinishReason, *c.Message.Content, err)
		}
		for _, f := range cat.Friends {
			if len([]rune(f)) > 8 {
				t.Errorf("choice %d: friend %q over maxLength 8", c.Index, f)
			}
		}
	}
}

// TestGuidedChoiceAndJSON: vLLM's guided_choice makes the text exactly
// one of the options, its guided_json is JSON Schema (an object or a
// string holding one), and two output formats at once are a 400.
func TestGuidedChoiceAndJSON(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	options := []string{"happy", "sad", "very sleepy"}
	seen := map[string]bool{}
	for seed := range 6 {
		status, body := ts.post(t, "/v1/completions", fmt.Sprintf(`{"model":"stories260K","prompt":"The cat was","max_tokens":20,"seed":%d,"guided_choice":["happy","sad","very sleepy"]}`, seed))
		var resp completionResponse
		if status != 200 || json.Unmarshal(body, &resp) != nil {
			t.Fatalf("status %d: %s", status, body)
		}
		if text := resp.Choices[0].Text; !slices.Contains(options, text) || *resp.Choices[0].FinishReason != "stop" {
			t.Errorf("seed %d: %q (%s), want one of %q", seed, text, *resp.Choices[0].FinishReason, options)
		}
		seen[resp.Choices[0].Text] = true
	}
	if len(seen) < 2 {
		t.Errorf("six seeds chose only %v", seen)
	}
	schema := `{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`
	for _, guided := range []string{schema, strconv.Quote(schema)} {
		status, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"The cat was","max_tokens":40,"temperature":0,"guided_json":`+guided+`}`)
		var resp completionResponse
		var v struct{ OK *bool }
		if status != 200 || json.Unmarshal(body, &resp) != nil || json.Unmarshal([]byte(resp.Choices[0].Text), &v) != nil || v.OK == nil {
			t.Errorf("guided_json %s: %d %s", guided, status, body)
		}
	}
	// guided_regex, and newer vLLM's structured_outputs for every kind.
	for _, c := range []struct{ format, want string }{
		{`"guided_regex":"(yes|no), [0-9]{2}!"`, `^(yes|no), [0-9]{2}!$`},
		{`"structured_outputs":{"regex":"[A-Z][a-z]{2,4}\\."}`, `^[A-Z][a-z]{2,4}\.$`},
		{`"structured_outputs":{"choice":["left","right"]}`, `^(left|right)$`},
		{`"structured_outputs":{"json":` + schema + `}`, `(?s)^\s*\{\s*"ok"\s*:\s*(true|false)\s*\}\s*$`},
		{`"structured_outputs":{"json":` + schema + `,"disable_any_whitespace":true}`, `^\{"ok":(true|false)\}$`},
		{`"guided_grammar":"root ::= answer \", \" [0-9]{2} \"!\"\nanswer ::= \"yes\" | \"no\""`, `^(yes|no), [0-9]{2}!$`},
		{`"structured_outputs":{"grammar":"root ::= [A-Z] [a-z]{2,4} (\".\" | \"!\")"}`, `^[A-Z][a-z]{2,4}[.!]$`},
	} {
		status, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"The cat was","max_tokens":60,"temperature":0,`+c.format+`}`)
		var resp completionResponse
		if status != 200 || json.Unmarshal(body, &resp) != nil || !regexp.MustCompile(c.want).MatchString(resp.Choices[0].Text) || *resp.Choices[0].FinishReason != "stop" {
			t.Errorf("%s: %d %s", c.format, status, body)
		}
	}
	for body, param := range map[string]string{
		`"guided_choice":["a"],"response_format":{"type":"json_object"}`:           "guided_choice",
		`"guided_json":{"type":"object"},"response_format":{"type":"json_object"}`: "guided_json",
		`"guided_choice":[]`:                                       "guided_choice",
		`"guided_json":{"type":"string"}`:                          "guided_json",
		`"guided_regex":"(a"`:                                      "guided_regex",
		`"guided_regex":"\\bword"`:                                 "guided_regex",
		`"guided_grammar":"root ::= x"`:                            "guided_grammar",
		`"guided_grammar":"root ::= root \"a\""`:                   "guided_grammar",
		`"guided_grammar":"root ::= \"a\"","guided_regex":"a"`:     "guided_grammar",
		`"structured_outputs":{"grammar":"root ::= x"}`:            "structured_outputs",
		`"structured_outputs":{"grammar":5}`:                       "structured_outputs",
		`"structured_outputs":{"regex":"a","choice":["a"]}`:        "structured_outputs",
		`"structured_outputs":{}`:                                  "structured_outputs",
		`"structured_outputs":{"regex":5}`:                         "structured_outputs",
		`"structured_outputs":[1]`:                                 "structured_outputs",
		`"structured_outputs":{"regex":"a"},"guided_choice":["a"]`: "structured_outputs",
	} {
		status, resp := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"hi",`+body+`}`)
		var e struct{ Error struct{ Param string } }
		if json.Unmarshal(resp, &e) != nil || status != 400 || e.Error.Param != param {
			t.Errorf("%s: %d %s, want a 400 naming %s", body, status, resp, param)
		}
	}
}

func TestChatStreamedAndNot(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	req := `{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":16,"temperature":0%s}`
	status, body := ts.post(t, "/v1/chat/completions", fmt.Sprintf(req, ""))
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var resp chatResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	// The template renders "<s>Once upon a time", the same ids as the
	// completion prompt.
	if *resp.Choices[0].Message.Content != storiesCompletion || resp.Choices[0].Message.Role != "assistant" || resp.Object != "chat.completion" {
		t.Fatalf("response %s", body)
	}
	events := ts.sseEvents(t, "/v1/chat/completions", fmt.Sprintf(req, `,"stream":true`))
	var text strings.Builder
	for i, ev := range events {
		delta := ev["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
		if i == 0 && delta["role"] != "assistant" {
			t.Fatalf("first chunk %v", ev)
		}
		if c, ok := delta["content"].(string); ok {
			text.WriteString(c)
		}
	}
	if text.String() != storiesCompletion {
		t.Fatalf("streamed %q", text.String())
	}
}

func TestNStopLogprobs(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	status, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":["Once upon a time","Once upon a time"],"n":2,"max_tokens":30,"temperature":0,"stop":["Lily"]}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var resp completionResponse
	json.Unmarshal(body, &resp)
	if len(resp.Choices) != 4 {
		t.Fatalf("%d choices", len(resp.Choices))
	}
	for i, c := range resp.Choices {
		if c.Index != i || c.Text != ", there was a little girl named " || *c.FinishReason != "stop" {
			t.Fatalf("choice %d: %+v", i, c)
		}
	}
	// skip_special_tokens false keeps <s> (forced here) in the text.
	for skip, want := range map[string]string{"true": "", "false": "<s><s>"} {
		status, body = ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"Once","max_tokens":2,"logit_bias":{"1":100},"skip_special_tokens":`+skip+`}`)
		if status != 200 || json.Unmarshal(body, &resp) != nil || resp.Choices[0].Text != want {
			t.Errorf("skip_special_tokens %s: %s, want text %q", skip, body, want)
		}
	}
	// vLLM's include_stop_str_in_output and min_tokens.
	for _, c := range []struct{ extra, text, finish string }{
		{`"include_stop_str_in_output":true`, ", there was a little girl named Lily", "stop"},
		{`"min_tokens":30`, "", "length"},
	} {
		status, body = ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","max_tokens":30,"temperature":0,"stop":["Lily"],`+c.extra+`}`)
		if status != 200 || json.Unmarshal(body, &resp) != nil {
			t.Fatalf("%s: status %d: %s", c.extra, status, body)
		}
		if got := resp.Choices[0]; c.text != "" && got.Text != c.text || *got.FinishReason != c.finish || c.text == "" && (resp.Usage.CompletionTokens != 30 || !strings.Contains(got.Text, "Lily")) {
			t.Errorf("%s: %s", c.extra, body)
		}
	}
	status, body = ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","max_tokens":3,"temperature":0,"logprobs":2}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	json.Unmarshal(body, &resp)
	lp := resp.Choices[0].Logprobs
	if lp == nil || len(lp.Tokens) != 3 || lp.Tokens[0] != "," || len(lp.TopLogprobs[0]) != 2 || lp.TokenLogprobs[0] == nil || *lp.TokenLogprobs[0] > 0 || *lp.TokenLogprobs[0] < -1 {
		t.Fatalf("logprobs %s", body)
	}
	status, body = ts.post(t, "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":2,"logprobs":true,"top_logprobs":3,"temperature":0}`)
	var cr chatResponse
	json.Unmarshal(body, &cr)
	if status != 200 || cr.Choices[0].Logprobs == nil || len(cr.Choices[0].Logprobs.Content) != 2 || len(cr.Choices[0].Logprobs.Content[0].TopLogprobs) != 3 {
		t.Fatalf("chat logprobs %d %s", status, body)
	}
	// Seeded sampling with n=2 gives two reproducible choices.
	req := `{"model":"stories260K","prompt":"Once upon a time","n":2,"max_tokens":12,"temperature":1,"seed":42}`
	_, a := ts.post(t, "/v1/completions", req)
	_, b := ts.post(t, "/v1/completions", req)
	var ra, rb completionResponse
	json.Unmarshal(a, &ra)
	json.Unmarshal(b, &rb)
	if ra.Choices[0].Text != rb.Choices[0].Text || ra.Choices[1].Text != rb.Choices[1].Text {
		t.Fatalf("seeded runs differ:\n%s\n%s", a, b)
	}
}

func TestModelsHealthVersionMetrics(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	for _, path := range []string{"/health", "/version", "/v1/models", "/metrics"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if path == "/v1/models" && !bytes.Contains(body, []byte(`"id":"stories260K"`)) {
			t.Fatalf("models: %s", body)
		}
		if path == "/metrics" && !bytes.Contains(body, []byte("gearbox:num_requests_running")) {
			t.Fatalf("metrics: %s", body)
		}
	}
}

// TestResponseFormat checks that response_format asking for text (the
// default) or JSON mode is served, and that the types it cannot honour are
// refused with a message that says why.
func TestResponseFormat(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	req := `{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":2%s}`
	for _, rf := range []string{``, `,"response_format":null`, `,"response_format":{"type":"text"}`, `,"response_format":{"type":"json_object"}`} {
		if status, body := ts.post(t, "/v1/chat/completions", fmt.Sprintf(req, rf)); status != 200 {
			t.Errorf("%q: %d %s", rf, status, body)
		}
	}
	for _, c := range []struct{ rf, msg string }{
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{}}}`, `the root must be an object`},
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"integer","multipleOf":2}}}}}`, `keyword "multipleOf" is not supported`},
		{`{"type":"json_schema","json_schema":{"name":"x"}}`, `needs "json_schema"`},
		{`{"type":"yaml"}`, `unknown response_format type "yaml"`},
		{`{"Type":"text"}`, `string "type"`},
		{`"json_object"`, `string "type"`},
	} {
		status, body := ts.post(t, "/v1/chat/completions", fmt.Sprintf(req, `,"response_format":`+c.rf))
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || status != 400 || !strings.Contains(e.Error.Message, c.msg) ||
			e.Error.Param == nil || *e.Error.Param != "response_format" {
			t.Errorf("%s: %d %s, want 400 for response_format saying %q", c.rf, status, body, c.msg)
		}
	}
}

// TestBadRequests holds every malformed request to its documented status
// and error body, and checks the server keeps serving.
func TestBadRequests(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	long := strings.Repeat("once upon a time ", 400)
	cases := []struct {
		name, path, body string
		status           int
		param            string
	}{
		{"bad JSON", "/v1/completions", `{"model":`, 400, ""},
		{"not an object", "/v1/completions", `[1,2]`, 400, ""},
		{"empty body", "/v1/completions", ``, 400, ""},
		{"missing model", "/v1/completions", `{"prompt":"hi"}`, 400, "model"},
		{"unknown model", "/v1/completions", `{"model":"gpt-9","prompt":"hi"}`, 404, "model"},
		{"missing prompt", "/v1/completions", `{"model":"stories260K"}`, 400, "prompt"},
		{"empty prompt", "/v1/completions", `{"model":"stories260K","prompt":""}`, 400, "prompt"},
		{"prompt wrong type", "/v1/completions", `{"model":"stories260K","prompt":{"a":1}}`, 400, "prompt"},
		{"token id out of range", "/v1/completions", `{"model":"stories260K","prompt":[1,99999]}`, 400, "prompt"},
		{"negative max_tokens", "/v1/completions", `{"model":"stories260K","prompt":"hi","max_tokens":-1}`, 400, "max_tokens"},
		{"zero max_tokens", "/v1/completions", `{"model":"stories260K","prompt":"hi","max_tokens":0}`, 400, "max_tokens"},
		{"huge max_tokens", "/v1/completions", `{"model":"stories260K","prompt":"hi","max_tokens":100000000}`, 400, "max_tokens"},
		{"max_tokens wrong type", "/v1/completions", `{"model":"stories260K","prompt":"hi","max_tokens":"ten"}`, 400, "max_tokens"},
		{"max_tokens float", "/v1/completions", `{"model":"stories260K","prompt":"hi","max_tokens":1.5}`, 400, "max_tokens"},
		{"temperature too high", "/v1/completions", `{"model":"stories260K","prompt":"hi","temperature":7}`, 400, "temperature"},
		{"temperature negative", "/v1/completions", `{"model":"stories260K","prompt":"hi","temperature":-1}`, 400, "temperature"},
		{"temperature string", "/v1/completions", `{"model":"stories260K","prompt":"hi","temperature":"hot"}`, 400, "temperature"},
		{"top_p zero", "/v1/completions", `{"model":"stories260K","prompt":"hi","top_p":0}`, 400, "top_p"},
		{"top_k negative", "/v1/completions", `{"model":"stories260K","prompt":"hi","top_k":-5}`, 400, "top_k"},
		{"n zero", "/v1/completions", `{"model":"stories260K","prompt":"hi","n":0}`, 400, "n"},
		{"n huge", "/v1/completions", `{"model":"stories260K","prompt":"hi","n":1000}`, 400, "n"},
		{"presence penalty", "/v1/completions", `{"model":"stories260K","prompt":"hi","presence_penalty":3}`, 400, "presence_penalty"},
		{"logprobs too many", "/v1/completions", `{"model":"stories260K","prompt":"hi","logprobs":50}`, 400, "logprobs"},
		{"stop wrong type", "/v1/completions", `{"model":"stories260K","prompt":"hi","stop":5}`, 400, "stop"},
		{"logit_bias key not an id", "/v1/completions", `{"model":"stories260K","prompt":"hi","logit_bias":{"five":1}}`, 400, "logit_bias"},
		{"logit_bias negative id", "/v1/completions", `{"model":"stories260K","prompt":"hi","logit_bias":{"-3":1}}`, 400, "logit_bias"},
		{"logit_bias id outside the vocabulary", "/v1/completions", `{"model":"stories260K","prompt":"hi","logit_bias":{"99999":1}}`, 400, "logit_bias"},
		{"logit_bias value too large", "/v1/completions", `{"model":"stories260K","prompt":"hi","logit_bias":{"5":101}}`, 400, "logit_bias"},
		{"logit_bias value not a number", "/v1/completions", `{"model":"stories260K","prompt":"hi","logit_bias":{"5":"up"}}`, 400, "logit_bias"},
		{"logit_bias not an object", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"logit_bias":[1]}`, 400, "logit_bias"},
		{"min_tokens negative", "/v1/completions", `{"model":"stories260K","prompt":"hi","min_tokens":-1}`, 400, "min_tokens"},
		{"min_tokens above max_tokens", "/v1/completions", `{"model":"stories260K","prompt":"hi","min_tokens":9,"max_tokens":8}`, 400, "min_tokens"},
		{"min_tokens above the context", "/v1/completions", `{"model":"stories260K","prompt":"hi","min_tokens":600}`, 400, "min_tokens"},
		{"min_tokens with a format", "/v1/completions", `{"model":"stories260K","prompt":"hi","min_tokens":2,"response_format":{"type":"json_object"}}`, 400, "min_tokens"},
		{"stream_options without stream", "/v1/completions", `{"model":"stories260K","prompt":"hi","stream_options":{"include_usage":true}}`, 400, "stream_options"},
		{"prompt over context", "/v1/completions", `{"model":"stories260K","prompt":"` + long + `"}`, 400, "prompt"},
		{"invalid UTF-8", "/v1/completions", "{\"model\":\"stories260K\",\"prompt\":\"\xff\xfe\"}", 400, ""},
		{"empty messages", "/v1/chat/completions", `{"model":"stories260K","messages":[]}`, 400, "messages"},
		{"missing messages", "/v1/chat/completions", `{"model":"stories260K"}`, 400, "messages"},
		{"bad role", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages"},
		{"content wrong type", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":5}]}`, 400, "messages"},
		{"image content", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages"},
		{"tools", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}`, 400, "tools"},
		{"response_format json_schema", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"text","schema":{}}}}`, 400, "response_format"},
		{"response_format unknown type", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"xml"}}`, 400, "response_format"},
		{"response_format not an object", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"response_format":"text"}`, 400, "response_format"},
		{"response_format array", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"response_format":[{"type":"text"}]}`, 400, "response_format"},
		{"response_format missing type", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"response_format":{}}`, 400, "response_format"},
		{"response_format null type", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"response_format":{"type":null}}`, 400, "response_format"},
		{"response_format type not a string", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"response_format":{"type":5}}`, 400, "response_format"},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"top_logprobs":2}`, 400, "top_logprobs"},
		{"messages over context", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"` + long + `"}]}`, 400, "messages"},
		{"wrong method", "/v1/models", ``, 405, ""},
		{"unknown route", "/v1/engines", `{}`, 404, ""},
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := http.MethodPost
			req, _ := http.NewRequest(method, ts.URL+c.path, strings.NewReader(c.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("error body %s", body)
			}
			if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
				t.Fatalf("param %v, want %q: %s", e.Error.Param, c.param, body)
			}
		})
	}
	// Oversized body: 413.
	big := `{"model":"stories260K","prompt":"` + strings.Repeat("a", 2<<20) + `"}`
	if status, body := ts.post(t, "/v1/completions", big); status != 413 {
		t.Fatalf("giant body: %d %s", status, body)
	}
	// Still serving.
	if status, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","max_tokens":4}`); status != 200 {
		t.Fatalf("after bad requests: %d %s", status, body)
	}
}

func TestAPIKey(t *testing.T) {
	ts := newTestServer(t, serverOpts{apiKey: "sekret"})
	status, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"hi","max_tokens":2}`)
	if status != 401 || !strings.Contains(string(body), "invalid_api_key") {
		t.Fatalf("no key: %d %s", status, body)
	}
	for _, c := range []struct {
		name, header string
		want         int
	}{
		{"right key", "Bearer sekret", 200},
		{"wrong key, same length", "Bearer sekreT", 401},
		{"wrong key, shorter", "Bearer sekre", 401},
		{"wrong key, longer", "Bearer sekret2", 401},
		{"key without Bearer", "sekret", 401},
		{"other scheme", "Basic sekret", 401},
		{"empty key", "Bearer ", 401},
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/completions", strings.NewReader(`{"model":"stories260K","prompt":"hi","max_tokens":2}`))
		req.Header.Set("Authorization", c.header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s (%q): %d %s, want %d", c.name, c.header, resp.StatusCode, body, c.want)
		}
		if c.want == 401 && !strings.Contains(string(body), "invalid_api_key") {
			t.Errorf("%s: body %s", c.name, body)
		}
	}
	// /health needs no key.
	resp, err := http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/health without key: %d", resp.StatusCode)
	}
}

// TestOverloadAndDisconnect floods past --max-waiting (429s, the server
// keeps serving) and drops streaming clients mid-stream (their KV blocks
// are freed, as the metrics show).
func TestOverloadAndDisconnect(t *testing.T) {
	ts := newTestServer(t, serverOpts{sched: sched.Config{MaxNumSeqs: 2, MaxWaiting: 3, MaxNumBatchedTokens: 64}})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
				strings.NewReader(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":200,"ignore_eos":true}`))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[429] == 0 || codes[200] == 0 || codes[200]+codes[429] != 24 {
		t.Fatalf("status codes %v", codes)
	}

	// Disconnect mid-stream. A stream may finish (400 tokens take the tiny
	// model about 0.1 s) before its client's cancellation lands on a
	// loaded machine, so each of the three ends cancelled or at its
	// length, and at least one cancelled.
	lengthBefore := scrapeMetrics(t, ts.URL)[`gearbox:request_success_total{finished_reason="length"}`]
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions",
			strings.NewReader(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":400,"ignore_eos":true,"stream":true}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 256)
		resp.Body.Read(buf) // the stream has started
		cancel()
		resp.Body.Close()
	}
	// The aborted requests' blocks are freed: the metrics say so.
	deadline := time.Now().Add(5 * time.Second)
	for {
		metrics := scrapeMetrics(t, ts.URL)
		cancelled := metrics[`gearbox:request_success_total{finished_reason="cancelled"}`]
		finished := metrics[`gearbox:request_success_total{finished_reason="length"}`] - lengthBefore
		// The engine frees a request's blocks before the server counts its
		// end, so wait for both.
		if metrics["gearbox:num_requests_running"] == 0 && metrics["gearbox:num_requests_waiting"] == 0 && metrics["gearbox:kv_cache_usage_perc"] == 0 &&
			cancelled >= 1 && cancelled+finished == 3 {
			// The placement and host-tier metrics exist (zero without seesaw).
			for _, name := range []string{"gearbox:num_requests_parked", "gearbox:host_kv_cache_usage_perc", "gearbox:engine_phase",
				"gearbox:placement_transitions_total", "gearbox:kv_swap_out_bytes_total", "gearbox:kv_swap_in_bytes_total"} {
				if v, ok := metrics[name]; !ok || v != 0 {
					t.Fatalf("%s = %v (present %v), want 0", name, v, ok)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after disconnects: %v cancelled and %v finished requests counted, engine %+v", cancelled, finished, ts.eng.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if status, _ := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"Once upon a time","max_tokens":4}`); status != 200 {
		t.Fatalf("after overload: %d", status)
	}
}

// scrapeMetrics reads /metrics into a map from series (name plus labels)
// to value.
func scrapeMetrics(t testing.TB, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		fmt.Sscan(line[i+1:], &v)
		out[line[:i]] = v
	}
	return out
}

func TestChatWithoutTemplate(t *testing.T) {
	ts := newTestServer(t, serverOpts{noTemplate: true})
	status, body := ts.post(t, "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}]}`)
	if status != 400 || !strings.Contains(string(body), "no chat template") {
		t.Fatalf("%d %s", status, body)
	}
}

// TestDrain: while draining, running requests finish and new ones get 503.
func TestDrain(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":300,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	ts.api.Drain()
	idle := ts.eng.Drain()
	if status, body := ts.post(t, "/v1/completions", `{"model":"stories260K","prompt":"hi","max_tokens":2}`); status != 503 || !strings.Contains(string(body), "draining") {
		t.Fatalf("during drain: %d %s", status, body)
	}
	rest, _ := io.ReadAll(r)
	if !strings.Contains(string(rest), `"finish_reason":"length"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the running stream did not finish: %q", rest[max(0, len(rest)-200):])
	}
	<-idle
}

// TestGatewayMetrics: /metrics carries what the Gateway API Inference
// Extension's endpoint picker scrapes by default (its model-server
// protocol), each equal to the gearbox: metric of the same meaning, and
// the KV cache's geometry; while a streaming request runs it counts as
// running and holds KV blocks under both names.
func TestGatewayMetrics(t *testing.T) {
	// Steps of 5 ms keep the 400-token request below running while the
	// metrics are scraped (at full speed it could end first).
	ts := newTestServer(t, serverOpts{blocks: 64, stepDelay: 5 * time.Millisecond})
	check := func(wantRunning float64) map[string]float64 {
		t.Helper()
		m := scrapeMetrics(t, ts.URL)
		for alias, ours := range map[string]string{
			"vllm:num_requests_waiting": "gearbox:num_requests_waiting",
			"vllm:num_requests_running": "gearbox:num_requests_running",
			"vllm:kv_cache_usage_perc":  "gearbox:kv_cache_usage_perc",
			"vllm:gpu_cache_usage_perc": "gearbox:kv_cache_usage_perc",
		} {
			a, okA := m[alias]
			g, okG := m[ours]
			if !okA || !okG || a != g {
				t.Fatalf("%s = %v (present %v), %s = %v (present %v)", alias, a, okA, ours, g, okG)
			}
		}
		if got := m["vllm:num_requests_running"]; got != wantRunning {
			t.Fatalf("vllm:num_requests_running = %v, want %v", got, wantRunning)
		}
		for _, name := range []string{"vllm:cache_config_info", "gearbox:cache_config_info"} {
			if v := m[name+`{block_size="16",num_gpu_blocks="64"}`]; v != 1 {
				t.Fatalf("%s{block_size=16,num_gpu_blocks=64} = %v, want 1", name, v)
			}
		}
		return m
	}
	if m := check(0); m["vllm:kv_cache_usage_perc"] != 0 {
		t.Fatalf("idle KV usage %v", m["vllm:kv_cache_usage_perc"])
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions",
		strings.NewReader(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":400,"ignore_eos":true,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	resp.Body.Read(make([]byte, 256)) // the stream has started
	if m := check(1); m["vllm:kv_cache_usage_perc"] <= 0 {
		t.Fatalf("a running request holds no KV: %v", m["vllm:kv_cache_usage_perc"])
	}
}

// TestSLOTiers: a request names its tier in the slo_tier field or the
// X-SLO-Tier header (the default tier when it names none); unknown tiers,
// a field and header that disagree, and tiers on a server without any are
// 400s naming slo_tier; /metrics counts each tier's requests and those
// that met both targets.
func TestSLOTiers(t *testing.T) {
	tiers, err := slo.New([]slo.Tier{
		{Name: "relaxed", TTFT: time.Minute, TPOT: time.Minute, Default: true},
		{Name: "impossible", TTFT: time.Nanosecond, TPOT: time.Nanosecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, serverOpts{tiers: tiers})
	send := func(path, body, header string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if header != "" {
			req.Header.Set(TierHeader, header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	const cmpl = `{"model":"stories260K","prompt":"Once upon a time","max_tokens":4,"ignore_eos":true%s}`
	for _, c := range []struct {
		body, header string
	}{
		{fmt.Sprintf(cmpl, `,"slo_tier":"relaxed"`), ""},
		{fmt.Sprintf(cmpl, ""), ""}, // the default tier
		{fmt.Sprintf(cmpl, ""), "impossible"},
		{fmt.Sprintf(cmpl, `,"slo_tier":"impossible"`), "impossible"},
		{`{"model":"stories260K","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"slo_tier":"impossible"}`, ""},
	} {
		path := "/v1/completions"
		if strings.Contains(c.body, "messages") {
			path = "/v1/chat/completions"
		}
		if status, body := send(path, c.body, c.header); status != 200 {
			t.Fatalf("%s (header %q): %d %s", c.body, c.header, status, body)
		}
	}
	for _, c := range []struct {
		body, header, want string
	}{
		{fmt.Sprintf(cmpl, `,"slo_tier":"gold"`), "", `unknown SLO tier \"gold\" (known: relaxed, impossible)`},
		{fmt.Sprintf(cmpl, ""), "gold", `unknown SLO tier \"gold\"`},
		{fmt.Sprintf(cmpl, `,"slo_tier":"relaxed"`), "impossible", "name different tiers"},
	} {
		status, body := send("/v1/completions", c.body, c.header)
		if status != 400 || !strings.Contains(body, c.want) || !strings.Contains(body, `"param":"slo_tier"`) {
			t.Fatalf("%s (header %q): %d %s, want 400 on slo_tier containing %q", c.body, c.header, status, body, c.want)
		}
	}
	m := scrapeMetrics(t, ts.URL)
	for series, want := range map[string]float64{
		`gearbox:slo_requests_total{tier="relaxed"}`:    2,
		`gearbox:slo_attained_total{tier="relaxed"}`:    2,
		`gearbox:slo_requests_total{tier="impossible"}`: 3,
		`gearbox:slo_attained_total{tier="impossible"}`: 0,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}

	plain := newTestServer(t, serverOpts{})
	status, body := plain.post(t, "/v1/completions", fmt.Sprintf(cmpl, `,"slo_tier":"relaxed"`))
	if status != 400 || !strings.Contains(string(body), "defines no tiers") {
		t.Fatalf("a tier on a server without tiers: %d %s", status, body)
	}
}
