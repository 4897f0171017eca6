package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/reasoning"
	"github.com/gearboxlm/gearbox/structured"
	"github.com/gearboxlm/gearbox/toolcall"
)

// hermesTemplate is a small chat template in Hermes' style: it lists the
// tools, writes an assistant's calls in <tool_call> tags and a tool
// result with the id it answers.
const hermesTemplate = `{%- if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}` +
	`{%- for m in messages %}<{{ m.role }}>{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}</tool_call>{% endfor %}{% endif %}` +
	`{{ m.content }}{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}{% endfor %}` +
	`{%- if add_generation_prompt %}<assistant>{% endif %}`

const testTools = `[{"type":"function","function":{"name":"get_weather","description":"Weather in a city",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":6},"unit":{"enum":["c","f"]}},"required":["city","unit"]}}},` +
	`{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"integer","minimum":0,"maximum":12}},"required":["zone"]}}}]`

// weatherCall checks one call against testTools' schemas.
func checkToolCall(t *testing.T, c toolCall) {
	t.Helper()
	if c.Type != "function" || !strings.HasPrefix(c.ID, "call-") {
		t.Errorf("call %+v: type and id", c)
	}
	dec := json.NewDecoder(strings.NewReader(c.Function.Arguments))
	dec.DisallowUnknownFields()
	switch c.Function.Name {
	case "get_weather":
		var args struct {
			City *string `json:"city"`
			Unit string  `json:"unit"`
		}
		if err := dec.Decode(&args); err != nil || args.City == nil || len([]rune(*args.City)) > 6 || args.Unit != "c" && args.Unit != "f" {
			t.Errorf("get_weather arguments %q: %v", c.Function.Arguments, err)
		}
	case "get_time":
		var args struct {
			Zone *int `json:"zone"`
		}
		if err := dec.Decode(&args); err != nil || args.Zone == nil || *args.Zone < 0 || *args.Zone > 12 {
			t.Errorf("get_time arguments %q: %v", c.Function.Arguments, err)
		}
	default:
		t.Errorf("call of %q, not offered", c.Function.Name)
	}
}

// TestToolChoiceForced: a named function and "required" hold every
// choice to well-formed calls of the offered functions, whatever the
// model (here the tiny built-in one, whose template knows no tools).
func TestToolChoiceForced(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	var bias []string // toward "]": the tiny model would go on calling until the length limit
	for id := range ts.m.Tokenizer.VocabSize() {
		if ts.m.Tokenizer.Piece(id) == "]" {
			bias = append(bias, fmt.Sprintf(`"%d":8`, id))
		}
	}
	base := fmt.Sprintf(`{"model":"stories260K","messages":[{"role":"user","content":"Weather?"}],"max_tokens":480,"temperature":1,"seed":3,"n":3,"logit_bias":{%s},"tools":%s`,
		strings.Join(bias, ","), testTools)
	for _, c := range []struct {
		choice   string
		parallel bool
		name     string // the named function
		finish   string
	}{
		{`{"type":"function","function":{"name":"get_weather"}}`, true, "get_weather", "stop"},
		{`{"type":"function","function":{"name":"get_time"}}`, true, "get_time", "stop"},
		{`"required"`, true, "", "tool_calls"},
		{`"required"`, false, "", "tool_calls"},
	} {
		body := fmt.Sprintf(`%s,"tool_choice":%s,"parallel_tool_calls":%v}`, base, c.choice, c.parallel)
		status, data := ts.post(t, "/v1/chat/completions", body)
		var resp chatResponse
		if status != 200 || json.Unmarshal(data, &resp) != nil || len(resp.Choices) != 3 {
			t.Fatalf("%s: status %d: %s", c.choice, status, data)
		}
		calls, ended := 0, 0
		for _, ch := range resp.Choices {
			m, finish := ch.Message, *ch.FinishReason
			// The tiny model may call on until the length limit under
			// "required"; a call cut short is content then.
			if len(m.ToolCalls) == 0 || finish != c.finish && (c.name != "" || finish != "length") || m.Content != nil && finish != "length" {
				t.Errorf("%s choice %d: %s", c.choice, ch.Index, data)
				continue
			}
			if finish == c.finish {
				ended++
			}
			if c.name != "" && (len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != c.name) || !c.parallel && len(m.ToolCalls) != 1 {
				t.Errorf("%s parallel %v choice %d: calls %+v", c.choice, c.parallel, ch.Index, m.ToolCalls)
			}
			for _, call := range m.ToolCalls {
				checkToolCall(t, call)
			}
			calls += len(m.ToolCalls)
		}
		t.Logf("%s parallel %v: %d calls in 3 choices, %d ended by the model", c.choice, c.parallel, calls, ended)
		if ended == 0 {
			t.Errorf("%s parallel %v: no choice ended with %q", c.choice, c.parallel, c.finish)
		}

		// Streamed with the same seed: the same calls, assembled from
		// deltas that name each call once and then add to its arguments.
		events := ts.sseEvents(t, "/v1/chat/completions", strings.TrimSuffix(body, "}")+`,"stream":true}`)
		streamed := map[int][]toolCall{}
		finish := map[int]string{}
		for _, ev := range events {
			for _, ch := range ev["choices"].([]any) {
				ch := ch.(map[string]any)
				i := int(ch["index"].(float64))
				if f, ok := ch["finish_reason"].(string); ok {
					finish[i] = f
				}
				delta, _ := ch["delta"].(map[string]any)
				raw, _ := json.Marshal(delta["tool_calls"])
				var parts []toolCall
				_ = json.Unmarshal(raw, &parts)
				for _, p := range parts {
					switch {
					case p.Index == nil:
						t.Fatalf("streamed call without an index: %s", raw)
					case *p.Index == len(streamed[i]) && p.ID != "" && p.Function.Name != "":
						p.Index = nil
						streamed[i] = append(streamed[i], p)
					case *p.Index == len(streamed[i])-1 && p.ID == "" && p.Function.Name == "":
						streamed[i][*p.Index].Function.Arguments += p.Function.Arguments
					default:
						t.Fatalf("streamed delta out of order: %s", raw)
					}
				}
			}
		}
		for _, ch := range resp.Choices {
			got, want := streamed[ch.Index], ch.Message.ToolCalls
			same := len(got) == len(want) && finish[ch.Index] == *ch.FinishReason
			for k := 0; same && k < len(got); k++ {
				same = got[k].Function == want[k].Function
			}
			if !same {
				t.Errorf("%s choice %d streamed %+v (%s), not %+v (%s)", c.choice, ch.Index, got, finish[ch.Index], want, *ch.FinishReason)
			}
		}
	}
}

// TestToolChoiceAuto: under "auto" the calls are read from the text in
// the model's syntax. guided_choice makes the tiny model write a given
// text: a call in Hermes' tags, or prose.
func TestToolChoiceAuto(t *testing.T) {
	ts := newTestServer(t, serverOpts{template: hermesTemplate})
	call := `Checking.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}</tool_call>`
	for _, stream := range []bool{false, true} {
		for _, c := range []struct {
			text    string
			content *string
			calls   []toolCall
			finish  string
		}{
			{call, ptr("Checking."), []toolCall{{Function: functionCall{Name: "get_weather", Arguments: `{"city":"Paris","unit":"c"}`}}}, "tool_calls"},
			{"No tools needed.", ptr("No tools needed."), nil, "stop"},
			{`<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>`, ptr(`<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>`), nil, "stop"},
		} {
			body := fmt.Sprintf(`{"model":"stories260K","messages":[{"role":"user","content":"Weather?"}],"max_tokens":200,"tools":%s,"guided_choice":[%q],"stream":%v}`, testTools, c.text, stream)
			var msg chatOut
			var finish string
			if !stream {
				status, data := ts.post(t, "/v1/chat/completions", body)
				var resp chatResponse
				if status != 200 || json.Unmarshal(data, &resp) != nil {
					t.Fatalf("status %d: %s", status, data)
				}
				msg, finish = *resp.Choices[0].Message, *resp.Choices[0].FinishReason
			} else {
				var content strings.Builder
				for _, ev := range ts.sseEvents(t, "/v1/chat/completions", body) {
					ch := ev["choices"].([]any)[0].(map[string]any)
					if f, ok := ch["finish_reason"].(string); ok {
						finish = f
					}
					delta := ch["delta"].(map[string]any)
					if s, ok := delta["content"].(string); ok {
						content.WriteString(s)
					}
					raw, _ := json.Marshal(delta["tool_calls"])
					var parts []toolCall
					_ = json.Unmarshal(raw, &parts)
					for _, p := range parts {
						p.Index = nil
						msg.ToolCalls = append(msg.ToolCalls, p)
					}
				}
				if content.Len() > 0 {
					msg.Content = ptr(content.String())
				}
			}
			if (msg.Content == nil) != (c.content == nil) || c.content != nil && *msg.Content != *c.content || finish != c.finish || len(msg.ToolCalls) != len(c.calls) {
				t.Errorf("stream %v, %q: content %v, calls %+v, finish %s", stream, c.text, msg.Content, msg.ToolCalls, finish)
				continue
			}
			for k, want := range c.calls {
				if got := msg.ToolCalls[k]; got.Function != want.Function || got.Type != "function" || got.ID == "" {
					t.Errorf("stream %v, %q: call %+v, want %+v", stream, c.text, got, want)
				}
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestToolConversation: an assistant turn's calls and the tool's answer
// reach the template as vLLM passes them (arguments decoded, the call's
// id on the tool turn), with the tools listed.
func TestToolConversation(t *testing.T) {
	ts := newTestServer(t, serverOpts{template: hermesTemplate})
	body := `{"model":"stories260K","max_tokens":1,"tools":` + testTools + `,"tool_choice":"none","messages":[` +
		`{"role":"user","content":"Weather?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"20C"}]}`
	status, data := ts.post(t, "/v1/chat/completions", body)
	var resp chatResponse
	if status != 200 || json.Unmarshal(data, &resp) != nil {
		t.Fatalf("status %d: %s", status, data)
	}
	want := `<tools>get_weather;get_time;</tools><user>Weather?<assistant><tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><tool>20C#call_1<assistant>`
	if n := len(ts.m.Tokenizer.Encode(want, false)); resp.Usage.PromptTokens != n {
		t.Errorf("prompt of %d tokens, want %d (%q)", resp.Usage.PromptTokens, n, want)
	}
}

func TestToolBadRequests(t *testing.T) {
	hermes := newTestServer(t, serverOpts{template: hermesTemplate})
	plain := newTestServer(t, serverOpts{})
	user := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		ts         *testServer
		body, want string
	}{
		{plain, user + `,"tools":` + testTools, "--tool-call-parser"}, // auto, the default, without a syntax
		{plain, user + `,"tools":` + testTools + `,"tool_choice":"auto"`, "--tool-call-parser"},
		{hermes, user + `,"tool_choice":"required"`, "needs tools"},
		{hermes, user + `,"tools":` + testTools + `,"tool_choice":{"type":"function","function":{"name":"nope"}}`, "does not offer"},
		{hermes, user + `,"tools":` + testTools + `,"tool_choice":"required","response_format":{"type":"json_object"}`, "another output format"},
		{hermes, user + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"s":{"type":"integer","multipleOf":2}}}}}],"tool_choice":"required"`, "multipleOf"},
		{hermes, user + `,"tools":[{"type":"function","function":{"name":"bad name"}}]`, "letters, digits"},
		{hermes, `"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{nope"}}]}]`, "arguments must be a string of JSON"},
		{hermes, `"messages":[{"role":"user","content":"x","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]`, "only assistant messages"},
		{hermes, `"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]}]`, "function.name is required"},
		{hermes, `"messages":[{"role":"tool","tool_call_id":"c"}]`, "content is required"},
		{hermes, user + `,"chat_template_kwargs":{"tools":[]}`, `may not set "tools"`},
		{hermes, `"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"` +
			strings.Repeat("[", 300) + strings.Repeat("]", 300) + `"}}]}]`, "nested more than 200 deep"}, // once a 500
		{hermes, user + `,"tool_choice":"none","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","default":` +
			strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}}}]`, "nested more than 200 deep"},
	} {
		status, data := c.ts.post(t, "/v1/chat/completions", `{"model":"stories260K",`+c.body+`}`)
		var e struct {
			Error struct{ Message, Type, Param string }
		}
		if status != 400 || json.Unmarshal(data, &e) != nil || !strings.Contains(e.Error.Message, c.want) || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: status %d %s, want a 400 with %q", c.body, status, data, c.want)
		}
	}
	// The servers still serve.
	for _, ts := range []*testServer{hermes, plain} {
		if status, data := ts.post(t, "/v1/chat/completions", `{"model":"stories260K",`+user+`,"max_tokens":2}`); status != 200 {
			t.Errorf("after the bad requests: status %d: %s", status, data)
		}
	}
}

// TestReasoning: with --reasoning-parser the thinking goes to
// message.reasoning (and reasoning_content), streamed or not. The
// template opens the thinking, as DeepSeek-R1's does, so the tiny model's
// whole greedy text, which never closes it, is thinking; with the
// thinking closed in the prompt it is all answer.
func TestReasoning(t *testing.T) {
	opened := `{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant><think>` + "\n" + `{% endif %}`
	closed := strings.Replace(opened, "<think>\n", "<think>\n\n</think>\n\n", 1)
	req := `{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":24,"temperature":0%s}`
	chatOnce := func(ts *testServer) chatOut {
		status, data := ts.post(t, "/v1/chat/completions", fmt.Sprintf(req, ""))
		var resp chatResponse
		if status != 200 || json.Unmarshal(data, &resp) != nil {
			t.Fatalf("status %d: %s", status, data)
		}
		return *resp.Choices[0].Message
	}
	plain := chatOnce(newTestServer(t, serverOpts{template: opened}))
	if plain.Reasoning != nil || plain.Content == nil || strings.Contains(*plain.Content, "</think>") {
		t.Fatalf("without a parser: %+v", plain)
	}
	text := strings.TrimSpace(*plain.Content)

	ts := newTestServer(t, serverOpts{template: opened, reasoning: reasoning.DeepSeekR1})
	m := chatOnce(ts)
	if m.Reasoning == nil || *m.Reasoning != text || m.ReasoningContent == nil || *m.ReasoningContent != text || m.Content == nil || *m.Content != "" {
		t.Errorf("reasoning %v, content %v; want all of %q as reasoning", m.Reasoning, m.Content, text)
	}
	var streamed, content strings.Builder
	for _, ev := range ts.sseEvents(t, "/v1/chat/completions", fmt.Sprintf(req, `,"stream":true`)) {
		delta := ev["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
		r, _ := delta["reasoning"].(string)
		rc, _ := delta["reasoning_content"].(string)
		if r != rc {
			t.Fatalf("delta %v: reasoning and reasoning_content differ", delta)
		}
		streamed.WriteString(r)
		c, _ := delta["content"].(string)
		content.WriteString(c)
	}
	if streamed.String() != text || content.String() != "" {
		t.Errorf("streamed reasoning %q, content %q; want %q as reasoning", streamed.String(), content.String(), text)
	}

	m = chatOnce(newTestServer(t, serverOpts{template: closed, reasoning: reasoning.DeepSeekR1}))
	if m.Reasoning != nil || m.Content == nil || *m.Content == "" {
		t.Errorf("thinking closed in the prompt: reasoning %v, content %v; want all answer", m.Reasoning, m.Content)
	}

	// An output format holds the answer, not the thinking: with the
	// thinking open the text is free (the tiny model never closes it);
	// closed in the prompt, the answer is the format's from the first
	// token.
	schema := `,"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}}}`
	req = strings.Replace(req, `"max_tokens":24`, `"max_tokens":40`, 1)
	status, data := ts.post(t, "/v1/chat/completions", fmt.Sprintf(req, schema))
	var resp chatResponse
	if status != 200 || json.Unmarshal(data, &resp) != nil {
		t.Fatalf("status %d: %s", status, data)
	}
	if r := resp.Choices[0].Message.Reasoning; r == nil || !strings.HasPrefix(text, *r) && !strings.HasPrefix(*r, text) {
		t.Errorf("format with the thinking open: reasoning %v, want the free greedy text %q", r, text)
	}
	status, data = newTestServer(t, serverOpts{template: closed, reasoning: reasoning.DeepSeekR1}).post(t, "/v1/chat/completions", fmt.Sprintf(req, schema))
	var v struct{ OK *bool }
	if status != 200 || json.Unmarshal(data, &resp) != nil || resp.Choices[0].Message.Content == nil || json.Unmarshal([]byte(*resp.Choices[0].Message.Content), &v) != nil || v.OK == nil {
		t.Errorf("format with the thinking closed: %d %s", status, data)
	}
}

// TestTurnThinkingAndCalls: a Qwen3 answer that thinks, then calls a
// tool in Hermes' tags, is read into its three parts, streamed or not.
func TestTurnThinkingAndCalls(t *testing.T) {
	s := New(Options{ToolSyntax: "hermes", ReasoningParser: reasoning.Qwen3})
	tools := chatTools{functions: []toolcall.Function{{Name: "get_time"}}, choice: toolcall.Choice{Mode: toolcall.Auto}, parallel: true}
	out := "<think>\nThe user wants the time.\n</think>\n\nOne moment.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"
	for _, stream := range []bool{false, true} {
		turn := s.newTurn(tools, generation{}, "<|im_start|>assistant\n")
		var thinking, content strings.Builder
		var calls []toolCall
		pieces := []string{out}
		if stream {
			pieces = strings.SplitAfter(out, "") // a byte at a time
		}
		for i, p := range pieces {
			th, c, cs := turn.next(p, i == len(pieces)-1, stream)
			if th != nil {
				thinking.WriteString(*th)
			}
			if c != nil {
				content.WriteString(*c)
			}
			calls = append(calls, cs...)
		}
		if thinking.String() != "The user wants the time." || content.String() != "One moment." || len(calls) != 1 ||
			calls[0].Function != (functionCall{Name: "get_time", Arguments: "{}"}) || calls[0].ID == "" || *turn.finishReason("stop") != "tool_calls" {
			t.Errorf("stream %v: thinking %q, content %q, calls %+v", stream, thinking.String(), content.String(), calls)
		}
	}
}

// TestToolChoiceAutoMistral: a template that teaches Mistral's
// [TOOL_CALLS] makes "auto" read that syntax, with special tokens kept in
// the text (the marker is one in Mistral's vocabularies).
func TestToolChoiceAutoMistral(t *testing.T) {
	ts := newTestServer(t, serverOpts{template: `{% for m in messages %}{{ m.content }}{% endfor %}{# [TOOL_CALLS] #}`})
	if ts.api.opts.ToolSyntax != toolcall.Mistral {
		t.Fatalf("syntax %q", ts.api.opts.ToolSyntax)
	}
	body := fmt.Sprintf(`{"model":"stories260K","messages":[{"role":"user","content":"Time?"}],"max_tokens":100,"tools":%s,"guided_choice":[%q]}`,
		testTools, `[TOOL_CALLS]get_time[ARGS]{"zone": 3}`)
	status, data := ts.post(t, "/v1/chat/completions", body)
	var resp chatResponse
	if status != 200 || json.Unmarshal(data, &resp) != nil {
		t.Fatalf("status %d: %s", status, data)
	}
	m := resp.Choices[0].Message
	if m.Content != nil || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function != (functionCall{Name: "get_time", Arguments: `{"zone":3}`}) || *resp.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("%s", data)
	}
}

// TestCompactJSON: with CompactJSON (--structured-outputs-disable-any-whitespace)
// forced calls and JSON formats have no whitespace between tokens.
func TestCompactJSON(t *testing.T) {
	ts := newTestServer(t, serverOpts{compact: true})
	for _, body := range []string{
		`"tools":` + testTools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}}`,
		`"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}}}`,
	} {
		status, data := ts.post(t, "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"Weather?"}],"max_tokens":200,"temperature":1,"seed":4,`+body+`}`)
		var resp chatResponse
		if status != 200 || json.Unmarshal(data, &resp) != nil {
			t.Fatalf("status %d: %s", status, data)
		}
		m := resp.Choices[0].Message
		text := ""
		if m.Content != nil {
			text = *m.Content
		} else if len(m.ToolCalls) == 1 {
			text = m.ToolCalls[0].Function.Arguments
		}
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(text)) != nil || compact.String() != text {
			t.Errorf("%s: %q is not compact JSON", body, text)
		}
	}
}

// TestAutoToolCallFormat: under "auto" with the Hermes syntax each call
// is held to the tools (a free format: the text around calls stays
// free, thinking included), unless FreeToolCalls, another output format,
// or a schema outside the compiled subset says otherwise.
func TestAutoToolCallFormat(t *testing.T) {
	s := New(Options{ToolSyntax: toolcall.Hermes})
	free := New(Options{ToolSyntax: toolcall.Hermes, FreeToolCalls: true})
	for _, c := range []struct {
		s      *Server
		body   string
		tagged bool
	}{
		{s, `{"tools":` + testTools + `}`, true},
		{s, `{"tools":` + testTools + `,"tool_choice":"auto"}`, true},
		{free, `{"tools":` + testTools + `}`, false},
		{s, `{"tools":` + testTools + `,"tool_choice":"none"}`, false},
		{s, `{"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}}}}]}`, false},
	} {
		var req chatRequest
		if err := json.Unmarshal([]byte(c.body), &req); err != nil {
			t.Fatal(err)
		}
		var g generation
		if _, e := c.s.parseTools(&req, &g); e != nil {
			t.Fatalf("%s: %v", c.body, e)
		}
		if tagged := g.format != nil && g.format.Free(); tagged != c.tagged {
			t.Errorf("%s (free %v): tagged format %v, want %v", c.body, c.s.opts.FreeToolCalls, tagged, c.tagged)
		}
	}
	// End to end: the tiny model writes free text under the format.
	ts := newTestServer(t, serverOpts{template: hermesTemplate})
	status, data := ts.post(t, "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":30,"temperature":1,"seed":5,"n":2,"tools":`+testTools+`}`)
	var resp chatResponse
	if status != 200 || json.Unmarshal(data, &resp) != nil || len(resp.Choices) != 2 || resp.Choices[0].Message.Content == nil || *resp.Choices[0].Message.Content == "" {
		t.Fatalf("auto under the format: %d %s", status, data)
	}
	// response_format wins, and its format holds from the first token.
	var req chatRequest
	_ = json.Unmarshal([]byte(`{"tools":`+testTools+`}`), &req)
	g := generation{format: structured.JSONObject()}
	if _, e := s.parseTools(&req, &g); e != nil || g.format.Free() {
		t.Errorf("with response_format: %v, free %v", e, g.format.Free())
	}
}

// TestRequiredHermes: "required" under Hermes' syntax holds the model to
// its own <tool_call> blocks, nothing else, which the Reader reads.
func TestRequiredHermes(t *testing.T) {
	ts := newTestServer(t, serverOpts{template: hermesTemplate})
	body := `{"model":"stories260K","messages":[{"role":"user","content":"Weather?"}],"max_tokens":300,"temperature":1,"seed":7,"n":3,` +
		`"tools":` + testTools + `,"tool_choice":"required","parallel_tool_calls":false}`
	status, data := ts.post(t, "/v1/chat/completions", body)
	var resp chatResponse
	if status != 200 || json.Unmarshal(data, &resp) != nil || len(resp.Choices) != 3 {
		t.Fatalf("status %d: %s", status, data)
	}
	for _, ch := range resp.Choices {
		m := ch.Message
		if m.Content != nil || len(m.ToolCalls) != 1 || *ch.FinishReason != "tool_calls" {
			t.Errorf("choice %d: %s", ch.Index, data)
			continue
		}
		checkToolCall(t, m.ToolCalls[0])
	}
}

// TestRenderLimit: a conversation too large for the template's render
// limits is the client's 400, not a 500.
func TestRenderLimit(t *testing.T) {
	ts := newTestServer(t, serverOpts{template: `{% for m in messages %}{% for n in messages %}{% endfor %}{{ m.content }}{% endfor %}`})
	msgs := strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"x"},`, 1500), ",")
	status, data := ts.post(t, "/v1/chat/completions", `{"model":"stories260K","max_tokens":1,"messages":[`+msgs+`]}`)
	var e struct {
		Error struct{ Message, Param string }
	}
	if status != 400 || json.Unmarshal(data, &e) != nil || e.Error.Param != "messages" || !strings.Contains(e.Error.Message, "template") {
		t.Errorf("status %d: %s", status, data)
	}
}
