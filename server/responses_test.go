package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/reasoning"
)

// responseEvents posts a streaming /v1/responses request and returns its
// events, checking that each SSE event name is its data's type, that the
// sequence numbers count from 0, and that no [DONE] follows.
func (ts *testServer) responseEvents(t *testing.T, body string) []responseEvent {
	t.Helper()
	resp, err := http.Post(ts.URL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	var events []responseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var ev responseEvent
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("event %q: %v", line, err)
			}
			if ev.Type != name || ev.SequenceNumber != len(events) {
				t.Fatalf("event %d named %q: %s", len(events), name, line)
			}
			events = append(events, ev)
		default:
			t.Fatalf("bad SSE line %q", line)
		}
	}
	return events
}

// assemble rebuilds a response's output from its events as a client
// does, checking that each delta names the open item.
func assemble(t *testing.T, events []responseEvent) (out []outputItem, final *responseObject) {
	t.Helper()
	for _, ev := range events {
		switch ev.Type {
		case "response.output_item.added":
			if *ev.OutputIndex != len(out) {
				t.Fatalf("item added at %d, have %d", *ev.OutputIndex, len(out))
			}
			it := *ev.Item
			if it.Content != nil {
				it.Content = &[]contentPart{}
			}
			out = append(out, it)
		case "response.content_part.added":
			*out[*ev.OutputIndex].Content = append(*out[*ev.OutputIndex].Content, *ev.Part)
		case "response.output_text.delta", "response.reasoning_text.delta":
			it := out[*ev.OutputIndex]
			if it.ID != ev.ItemID {
				t.Fatalf("delta for %q, item %q", ev.ItemID, it.ID)
			}
			(*it.Content)[*ev.ContentIndex].Text += *ev.Delta
		case "response.function_call_arguments.delta":
			*out[*ev.OutputIndex].Arguments += *ev.Delta
		case "response.output_item.done":
			out[*ev.OutputIndex].Status = ev.Item.Status
		case "response.completed", "response.incomplete", "response.failed":
			final = ev.Response
		}
	}
	if final == nil {
		t.Fatal("no final event")
	}
	return out, final
}

func TestResponses(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	req := `{"model":"stories260K","input":"Once upon a time","max_output_tokens":16,"temperature":0,"metadata":{"k":"v"}%s}`
	status, body := ts.post(t, "/v1/responses", strings.Replace(req, "%s", "", 1))
	var resp responseObject
	if status != 200 || json.Unmarshal(body, &resp) != nil {
		t.Fatalf("status %d: %s", status, body)
	}
	// The chat template renders "<s>Once upon a time", so the text is the
	// completion's; 16 tokens is the limit, so the response is incomplete.
	if resp.Object != "response" || !strings.HasPrefix(resp.ID, "resp") || resp.Status != "incomplete" || resp.IncompleteDetails.Reason != "max_output_tokens" ||
		len(resp.Output) != 1 || resp.Output[0].Type != "message" || (*resp.Output[0].Content)[0].Text != storiesCompletion ||
		resp.Usage.OutputTokens != 16 || resp.Usage.TotalTokens != resp.Usage.InputTokens+16 || resp.Metadata["k"] != "v" || string(resp.ToolChoice) != `"auto"` {
		t.Fatalf("response %s", body)
	}
	events := ts.responseEvents(t, strings.Replace(req, "%s", `,"stream":true`, 1))
	out, final := assemble(t, events)
	if events[0].Type != "response.created" || events[1].Type != "response.in_progress" || final.Status != "incomplete" ||
		len(out) != 1 || (*out[0].Content)[0].Text != storiesCompletion || out[0].Status != "completed" ||
		(*final.Output[0].Content)[0].Text != storiesCompletion || final.Usage.OutputTokens != 16 {
		t.Fatalf("streamed: %+v, final %+v", out, final)
	}

	// A named function: one function_call item, streamed the same.
	tools := `[{"type":"function","name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"integer","minimum":0,"maximum":12}},"required":["zone"]}}]`
	req = `{"model":"stories260K","input":[{"role":"user","content":[{"type":"input_text","text":"Time?"}]}],"max_output_tokens":100,"temperature":0,` +
		`"tools":` + tools + `,"tool_choice":{"type":"function","name":"get_time"}%s}`
	status, body = ts.post(t, "/v1/responses", strings.Replace(req, "%s", "", 1))
	if status != 200 || json.Unmarshal(body, &resp) != nil || resp.Status != "completed" || len(resp.Output) != 1 {
		t.Fatalf("tool call: status %d: %s", status, body)
	}
	call := resp.Output[0]
	var args struct{ Zone *int }
	if call.Type != "function_call" || call.Name != "get_time" || call.CallID == "" || json.Unmarshal([]byte(*call.Arguments), &args) != nil || args.Zone == nil {
		t.Fatalf("tool call: %s", body)
	}
	out, final = assemble(t, ts.responseEvents(t, strings.Replace(req, "%s", `,"stream":true`, 1)))
	if len(out) != 1 || out[0].Name != "get_time" || *out[0].Arguments != *call.Arguments || final.Status != "completed" {
		t.Fatalf("streamed tool call: %+v", out)
	}
}

// TestResponsesInput: instructions, messages, function calls and their
// outputs reach the chat template as the chat API's turns.
func TestResponsesInput(t *testing.T) {
	ts := newTestServer(t, serverOpts{template: hermesTemplate})
	body := `{"model":"stories260K","max_output_tokens":1,"instructions":"Be brief.","tool_choice":"none",` +
		`"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}},{"type":"function","name":"get_time"}],"input":[` +
		`{"role":"user","content":"Weather?"},` +
		`{"type":"reasoning","id":"rs_1","summary":[]},` +
		`{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\": \"Paris\"}"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"20C"}]}`
	status, data := ts.post(t, "/v1/responses", body)
	var resp responseObject
	if status != 200 || json.Unmarshal(data, &resp) != nil {
		t.Fatalf("status %d: %s", status, data)
	}
	want := `<tools>get_weather;get_time;</tools><system>Be brief.<user>Weather?<assistant><tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><tool>20C#call_1<assistant>`
	if n := len(ts.m.Tokenizer.Encode(want, false)); resp.Usage.InputTokens != n {
		t.Errorf("prompt of %d tokens, want %d (%q)", resp.Usage.InputTokens, n, want)
	}
	for _, c := range []struct{ body, param, want string }{
		{`"input":"hi","previous_response_id":"resp_1"`, "previous_response_id", "needs the server to keep responses"},
		{`"input":"hi","background":true`, "background", "not supported"},
		{`"input":[]`, "input", "non-empty list"},
		{`"input":5`, "input", "string or a non-empty list"},
		{`"input":[{"type":"computer_call"}]`, "input", `"computer_call" is not supported`},
		{`"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]`, "input", `"input_image" is not supported`},
		{`"input":[{"type":"function_call","name":"f"}]`, "input", "call_id and name"},
		{`"input":"hi","tools":[{"type":"web_search"}]`, "tools", "not supported"},
		{`"input":"hi","tool_choice":{"type":"function"}`, "tool_choice", "must be"},
		{`"input":"hi","max_output_tokens":0`, "max_output_tokens", "at least 1"},
		{`"input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{"type":"string"}}}`, "text", "root must be an object"},
		{`"input":"hi","max_output_tokens":100000`, "max_output_tokens", "maximum context length"},
	} {
		status, data := ts.post(t, "/v1/responses", `{"model":"stories260K",`+c.body+`}`)
		var e struct {
			Error struct{ Message, Param string }
		}
		if status != 400 || json.Unmarshal(data, &e) != nil || e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("%s: status %d %s, want a 400 on %s with %q", c.body, status, data, c.param, c.want)
		}
	}
}

// TestResponsesReasoning: with a reasoning parser the thinking is a
// reasoning item, streamed as reasoning_text events. The template opens
// the thinking and the tiny model never closes it, so all of its text is
// thinking.
func TestResponsesReasoning(t *testing.T) {
	opened := `{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant><think>` + "\n"
	ts := newTestServer(t, serverOpts{template: opened, reasoning: reasoning.DeepSeekR1})
	req := `{"model":"stories260K","input":"Once upon a time","max_output_tokens":12,"temperature":0%s}`
	status, body := ts.post(t, "/v1/responses", strings.Replace(req, "%s", "", 1))
	var resp responseObject
	if status != 200 || json.Unmarshal(body, &resp) != nil || len(resp.Output) != 1 || resp.Output[0].Type != "reasoning" ||
		resp.Output[0].Summary == nil || (*resp.Output[0].Content)[0].Type != "reasoning_text" || (*resp.Output[0].Content)[0].Text == "" {
		t.Fatalf("status %d: %s", status, body)
	}
	events := ts.responseEvents(t, strings.Replace(req, "%s", `,"stream":true`, 1))
	out, final := assemble(t, events)
	if len(out) != 1 || (*out[0].Content)[0].Text != (*resp.Output[0].Content)[0].Text || final.Status != "incomplete" {
		t.Fatalf("streamed %+v, want %+v", out, resp.Output)
	}
	if !slices.ContainsFunc(events, func(ev responseEvent) bool { return ev.Type == "response.reasoning_text.delta" }) {
		t.Error("no reasoning_text.delta event")
	}
}

// TestResponsesStore: with a store the server keeps the last responses:
// GET and DELETE /v1/responses/{id}, and previous_response_id continues
// a kept conversation (its turns, then the new input, under the new
// instructions); the oldest is forgotten first, and store false keeps
// none.
func TestResponsesStore(t *testing.T) {
	ts := newTestServer(t, serverOpts{template: hermesTemplate, store: 2})
	create := func(body string) responseObject {
		t.Helper()
		status, data := ts.post(t, "/v1/responses", `{"model":"stories260K","max_output_tokens":4,"temperature":0,`+body+`}`)
		var resp responseObject
		if status != 200 || json.Unmarshal(data, &resp) != nil {
			t.Fatalf("%s: status %d: %s", body, status, data)
		}
		return resp
	}
	get := func(id string) (int, responseObject) {
		resp, err := http.Get(ts.URL + "/v1/responses/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r responseObject
		_ = json.NewDecoder(resp.Body).Decode(&r)
		return resp.StatusCode, r
	}
	first := create(`"input":"Once upon a time","instructions":"Be brief."`)
	if !first.Store {
		t.Fatalf("store %v", first.Store)
	}
	if status, got := get(first.ID); status != 200 || got.ID != first.ID || (*got.Output[0].Content)[0].Text != (*first.Output[0].Content)[0].Text {
		t.Fatalf("GET: %d %+v", status, got)
	}
	// The continuation renders the kept turns after the new instructions.
	next := create(`"input":"And then?","instructions":"Go on.","previous_response_id":"` + first.ID + `"`)
	want := "<system>Go on.<user>Once upon a time<assistant>" + (*first.Output[0].Content)[0].Text + "<user>And then?<assistant>"
	if n := len(ts.m.Tokenizer.Encode(want, false)); next.Usage.InputTokens != n {
		t.Errorf("continuation prompt of %d tokens, want %d (%q)", next.Usage.InputTokens, n, want)
	}
	// store false keeps nothing; a third kept response forgets the first.
	unkept := create(`"input":"x","store":false`)
	if status, _ := get(unkept.ID); status != 404 || unkept.Store {
		t.Errorf("store false: GET %d, store %v", status, unkept.Store)
	}
	create(`"input":"y"`)
	if status, _ := get(first.ID); status != 404 {
		t.Errorf("the oldest of 3 in a store of 2: GET %d", status)
	}
	status, data := ts.post(t, "/v1/responses", `{"model":"stories260K","input":"z","previous_response_id":"`+first.ID+`"}`)
	if status != 400 || !strings.Contains(string(data), "not found") {
		t.Errorf("previous_response_id of a forgotten response: %d %s", status, data)
	}
	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/v1/responses/"+next.ID, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	resp.Body.Close()
	if status, _ := get(next.ID); status != 404 {
		t.Errorf("after DELETE: GET %d", status)
	}
	if status, _ := ts.post(t, "/v1/responses/"+next.ID, `{}`); status != 405 {
		t.Errorf("POST /v1/responses/{id}: %d", status)
	}
}
