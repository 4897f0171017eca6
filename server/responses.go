package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/gearboxlm/gearbox/engine"
)

// responsesRequest is OpenAI's POST /v1/responses. It is served as a chat
// request: the input items become chat messages (instructions the system
// turn, function calls and their outputs assistant tool_calls and tool
// turns), the flat tools and tool_choice the chat API's, and text.format
// the response_format. With a store (Options.ResponsesStore) the server
// keeps the last responses in memory for previous_response_id and GET
// /v1/responses/{id}; background responses are refused.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Stream             bool            `json:"stream"`
	Text               *responseText   `json:"text"`
	Store              *bool           `json:"store"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Background         bool            `json:"background"`
	Metadata           map[string]any  `json:"metadata"`
	User               string          `json:"user"`
	Reasoning          json.RawMessage `json:"reasoning"` // accepted: how much a model thinks is its chat template's (chat_template_kwargs)
	Include            []string        `json:"include"`
	SLOTier            string          `json:"slo_tier"`
	ChatTemplateKwargs map[string]any  `json:"chat_template_kwargs"` // vLLM's extra, as on chat
}

type responseText struct {
	Format json.RawMessage `json:"format"`
}

var responsesFields = knownFields("model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice",
	"parallel_tool_calls", "stream", "text", "store", "previous_response_id", "background", "metadata", "user", "reasoning", "include",
	"slo_tier", "chat_template_kwargs")

// chatRequest turns the request into the chat request that serves it:
// its instructions, then prev (the conversation of the previous
// response), then its input; turns is prev and the input, the
// conversation this response continues.
func (req *responsesRequest) chatRequest(prev []chatMessage) (c *chatRequest, turns []chatMessage, e *apiError) {
	if req.Background {
		return nil, nil, invalid("background", "background responses are not supported")
	}
	c = &chatRequest{ParallelToolCalls: req.ParallelToolCalls, ChatTemplateKwargs: req.ChatTemplateKwargs}
	c.Model, c.MaxTokens, c.Temperature, c.TopP, c.Stream, c.User, c.SLOTier = req.Model, req.MaxOutputTokens, req.Temperature, req.TopP, req.Stream, req.User, req.SLOTier
	if req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1 {
		return nil, nil, invalid("max_output_tokens", "max_output_tokens must be at least 1, got %d", *req.MaxOutputTokens)
	}
	if req.Instructions != nil && *req.Instructions != "" {
		c.Messages = append(c.Messages, textMessage("system", *req.Instructions))
	}
	msgs, e := inputMessages(req.Input)
	if e != nil {
		return nil, nil, e
	}
	turns = append(slices.Clone(prev), msgs...)
	c.Messages = append(c.Messages, turns...)
	if c.Tools, e = nestedTools(req.Tools); e != nil {
		return nil, nil, e
	}
	if c.ToolChoice, e = chatToolChoice(req.ToolChoice); e != nil {
		return nil, nil, e
	}
	if req.Text != nil {
		if c.ResponseFormat, e = chatResponseFormat(req.Text.Format); e != nil {
			return nil, nil, e
		}
	}
	return c, turns, nil
}

func textMessage(role, text string) chatMessage {
	content, _ := json.Marshal(text)
	return chatMessage{Role: role, Content: content}
}

// inputMessages reads input: a string (one user turn) or a list of items:
// messages ({"role", "content"}: a string or input_text/output_text
// parts), function_call and function_call_output items, and reasoning
// items (dropped: the template decides what a model sees of its past
// thinking).
func inputMessages(raw json.RawMessage) ([]chatMessage, *apiError) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []chatMessage{textMessage("user", text)}, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return nil, invalid("input", "input must be a string or a non-empty list of items")
	}
	var out []chatMessage
	for i, item := range items {
		var it struct {
			Type      string          `json:"type"`
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			CallID    string          `json:"call_id"`
			Name      string          `json:"name"`
			Arguments string          `json:"arguments"`
			Output    json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(item, &it); err != nil {
			return nil, invalid("input", "input[%d] must be an item object: %v", i, err)
		}
		switch it.Type {
		case "", "message":
			content, e := inputContent(it.Content, i)
			if e != nil {
				return nil, e
			}
			out = append(out, chatMessage{Role: it.Role, Content: content})
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, invalid("input", "input[%d]: a function_call needs call_id and name", i)
			}
			call := toolCall{ID: it.CallID, Type: "function", Function: functionCall{Name: it.Name, Arguments: it.Arguments}}
			if n := len(out); n > 0 && out[n-1].Role == "assistant" { // calls of one turn, or a turn's text and its calls
				out[n-1].ToolCalls = append(out[n-1].ToolCalls, call)
			} else {
				out = append(out, chatMessage{Role: "assistant", ToolCalls: []toolCall{call}})
			}
		case "function_call_output":
			var output string
			if it.CallID == "" || json.Unmarshal(it.Output, &output) != nil {
				return nil, invalid("input", "input[%d]: a function_call_output needs call_id and a string output", i)
			}
			out = append(out, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: it.Output})
		case "reasoning":
		default:
			return nil, invalid("input", "input[%d]: item type %q is not supported (message, function_call, function_call_output, reasoning)", i, it.Type)
		}
	}
	return out, nil
}

// inputContent flattens a message's content parts (input_text,
// output_text) into the chat content string.
func inputContent(raw json.RawMessage, i int) (json.RawMessage, *apiError) {
	text, e := textContent(raw, fmt.Sprintf("input[%d].content", i), "input", "input_text", "output_text", "text")
	if e != nil {
		return nil, e
	}
	content, _ := json.Marshal(text)
	return content, nil
}

// nestedTools turns the Responses API's flat function tools, {"type":
// "function", "name", "description", "parameters", "strict"}, into the
// chat API's nested ones.
func nestedTools(raw json.RawMessage) (json.RawMessage, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var tools []map[string]json.RawMessage
	if json.Unmarshal(raw, &tools) != nil {
		return nil, invalid("tools", `tools must be a list of {"type": "function", "name": ..., "parameters": {...}}`)
	}
	out := make([]map[string]any, len(tools))
	for i, t := range tools {
		if string(t["type"]) != `"function"` {
			return nil, invalid("tools", "tools[%d].type %s is not supported (function)", i, t["type"])
		}
		fn := map[string]json.RawMessage{}
		for _, k := range []string{"name", "description", "parameters", "strict"} {
			if v, ok := t[k]; ok {
				fn[k] = v
			}
		}
		out[i] = map[string]any{"type": "function", "function": fn}
	}
	data, _ := json.Marshal(out)
	return data, nil
}

// chatToolChoice turns tool_choice's {"type": "function", "name": ...}
// into the chat API's {"type": "function", "function": {"name": ...}}.
func chatToolChoice(raw json.RawMessage) (json.RawMessage, *apiError) {
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if len(raw) == 0 || raw[0] != '{' {
		return raw, nil
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Name == "" {
		return nil, invalid("tool_choice", `tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...}`)
	}
	return json.RawMessage(fmt.Sprintf(`{"type": "function", "function": {"name": %q}}`, named.Name)), nil
}

// chatResponseFormat turns text.format ({"type": "text"}, {"type":
// "json_object"} or {"type": "json_schema", "name", "schema", "strict"})
// into the chat API's response_format.
func chatResponseFormat(raw json.RawMessage) (json.RawMessage, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var f struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	}
	if json.Unmarshal(raw, &f) != nil {
		return nil, invalid("text", `text.format must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "name": ..., "schema": {...}}`)
	}
	if f.Type != "json_schema" {
		return raw, nil
	}
	data, _ := json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": f.Name, "schema": f.Schema}})
	return data, nil
}

// responseObject is the Responses API's response.
type responseObject struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	CreatedAt         int64           `json:"created_at"`
	Status            string          `json:"status"` // in_progress, completed, incomplete, failed
	Error             *apiError       `json:"error"`
	IncompleteDetails *incomplete     `json:"incomplete_details"`
	Instructions      *string         `json:"instructions"`
	MaxOutputTokens   *int            `json:"max_output_tokens"`
	Model             string          `json:"model"`
	Output            []outputItem    `json:"output"`
	ParallelToolCalls bool            `json:"parallel_tool_calls"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	Tools             json.RawMessage `json:"tools"`
	Text              responseText    `json:"text"`
	Store             bool            `json:"store"`
	Metadata          map[string]any  `json:"metadata"`
	Usage             *responseUsage  `json:"usage"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type responseUsage struct {
	InputTokens         int           `json:"input_tokens"`
	InputTokensDetails  cachedDetails `json:"input_tokens_details"`
	OutputTokens        int           `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type cachedDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// outputItem is one item of a response's output: a message, a function
// call, or a reasoning model's thinking.
type outputItem struct {
	Type    string         `json:"type"` // message, function_call, reasoning
	ID      string         `json:"id"`
	Status  string         `json:"status,omitempty"`
	Role    string         `json:"role,omitempty"`
	Content *[]contentPart `json:"content,omitempty"` // message and reasoning
	Summary *[]any         `json:"summary,omitempty"` // reasoning: always empty
	// function_call
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

type contentPart struct {
	Type        string `json:"type"` // output_text, reasoning_text
	Text        string `json:"text"`
	Annotations *[]any `json:"annotations,omitempty"` // output_text: always empty
}

// responseEvent is one streamed event; Type is also its SSE event name.
type responseEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response,omitempty"`
	OutputIndex    *int            `json:"output_index,omitempty"`
	Item           *outputItem     `json:"item,omitempty"`
	ItemID         string          `json:"item_id,omitempty"`
	ContentIndex   *int            `json:"content_index,omitempty"`
	Part           *contentPart    `json:"part,omitempty"`
	Delta          *string         `json:"delta,omitempty"`
	Text           *string         `json:"text,omitempty"`
	Arguments      *string         `json:"arguments,omitempty"`
	Logprobs       *[]any          `json:"logprobs,omitempty"`
}

// responseBuilder builds a response's output items from a choice's
// thinking, text and calls as they come, and, streaming, sends the events
// that build them on the client (emit; nil when not streaming).
type responseBuilder struct {
	s    *Server
	resp *responseObject
	open int // the output item still being written; -1 when none
	emit func(responseEvent) error
	seq  int
}

func (b *responseBuilder) send(ev responseEvent) error {
	if b.emit == nil {
		return nil
	}
	ev.SequenceNumber = b.seq
	b.seq++
	return b.emit(ev)
}

func ptrTo[T any](v T) *T { return &v }

// closeItem finishes the open item: its text's done events, then the
// item's.
func (b *responseBuilder) closeItem() error {
	if b.open < 0 {
		return nil
	}
	i := b.open
	b.open = -1
	it := &b.resp.Output[i]
	it.Status = "completed"
	switch it.Type {
	case "message", "reasoning":
		part := (*it.Content)[0]
		done := "response.output_text.done"
		if it.Type == "reasoning" {
			done = "response.reasoning_text.done"
		}
		ev := responseEvent{Type: done, OutputIndex: ptrTo(i), ItemID: it.ID, ContentIndex: ptrTo(0), Text: ptrTo(part.Text)}
		if it.Type == "message" {
			ev.Logprobs = &[]any{}
		}
		if err := b.send(ev); err != nil {
			return err
		}
		if err := b.send(responseEvent{Type: "response.content_part.done", OutputIndex: ptrTo(i), ItemID: it.ID, ContentIndex: ptrTo(0), Part: &part}); err != nil {
			return err
		}
	case "function_call":
		if err := b.send(responseEvent{Type: "response.function_call_arguments.done", OutputIndex: ptrTo(i), ItemID: it.ID, Arguments: it.Arguments}); err != nil {
			return err
		}
	}
	item := *it
	return b.send(responseEvent{Type: "response.output_item.done", OutputIndex: ptrTo(i), Item: &item})
}

// text adds text to the open message (kind "message") or thinking
// ("reasoning") item, opening one first when the open item is another.
func (b *responseBuilder) text(kind, delta string) error {
	if b.open < 0 || b.resp.Output[b.open].Type != kind {
		if err := b.closeItem(); err != nil {
			return err
		}
		it := outputItem{Type: kind, Status: "in_progress"}
		part := contentPart{Type: "output_text", Annotations: &[]any{}}
		if kind == "message" {
			it.ID, it.Role = b.s.newID("msg"), "assistant"
		} else {
			it.ID, it.Summary, part = b.s.newID("rs"), &[]any{}, contentPart{Type: "reasoning_text"}
		}
		b.open = len(b.resp.Output)
		added := it
		added.Content = &[]contentPart{}
		it.Content = &[]contentPart{part}
		b.resp.Output = append(b.resp.Output, it)
		if err := b.send(responseEvent{Type: "response.output_item.added", OutputIndex: ptrTo(b.open), Item: &added}); err != nil {
			return err
		}
		if err := b.send(responseEvent{Type: "response.content_part.added", OutputIndex: ptrTo(b.open), ItemID: it.ID, ContentIndex: ptrTo(0), Part: &part}); err != nil {
			return err
		}
	}
	it := &b.resp.Output[b.open]
	(*it.Content)[0].Text += delta
	ev := responseEvent{Type: "response.output_text.delta", OutputIndex: ptrTo(b.open), ItemID: it.ID, ContentIndex: ptrTo(0), Delta: ptrTo(delta)}
	if kind == "reasoning" {
		ev.Type = "response.reasoning_text.delta"
	} else {
		ev.Logprobs = &[]any{}
	}
	return b.send(ev)
}

// call adds a piece of a call: a new function_call item when it has an
// id, else more arguments of the open one.
func (b *responseBuilder) call(c toolCall) error {
	if c.ID != "" {
		if err := b.closeItem(); err != nil {
			return err
		}
		it := outputItem{Type: "function_call", ID: "fc_" + c.ID, CallID: c.ID, Name: c.Function.Name, Arguments: ptrTo(""), Status: "in_progress"}
		b.open = len(b.resp.Output)
		b.resp.Output = append(b.resp.Output, it)
		added := it
		if err := b.send(responseEvent{Type: "response.output_item.added", OutputIndex: ptrTo(b.open), Item: &added}); err != nil {
			return err
		}
	}
	if b.open < 0 || b.resp.Output[b.open].Type != "function_call" || c.Function.Arguments == "" {
		return nil // pieces of a call follow its first, with nothing between
	}
	it := &b.resp.Output[b.open]
	*it.Arguments += c.Function.Arguments
	return b.send(responseEvent{Type: "response.function_call_arguments.delta", OutputIndex: ptrTo(b.open), ItemID: it.ID, Delta: ptrTo(c.Function.Arguments)})
}

// add reads one piece of the choice through its turn.
func (b *responseBuilder) add(turn *chatTurn, text string, end bool) error {
	thinking, content, calls := turn.next(text, end, true)
	if thinking != nil {
		if err := b.text("reasoning", *thinking); err != nil {
			return err
		}
	}
	if content != nil {
		if err := b.text("message", *content); err != nil {
			return err
		}
	}
	for _, c := range calls {
		if err := b.call(c); err != nil {
			return err
		}
	}
	if end {
		return b.closeItem()
	}
	return nil
}

// finish sets the response's final status and usage.
func (b *responseBuilder) finish(j *job, prompt int) {
	switch j.finish {
	case engine.FinishLength:
		b.resp.Status, b.resp.IncompleteDetails = "incomplete", &incomplete{Reason: "max_output_tokens"}
	case engine.FinishStop:
		b.resp.Status = "completed"
	default: // cancelled: the server is draining
		b.resp.Status, b.resp.Error = "failed", draining()
	}
	u := &responseUsage{InputTokens: prompt, OutputTokens: j.usage.CompletionTokens}
	u.InputTokensDetails.CachedTokens = j.usage.CachedTokens
	u.TotalTokens = u.InputTokens + u.OutputTokens
	b.resp.Usage = u
}

// responses serves POST /v1/responses.
func (s *Server) responses(w http.ResponseWriter, r *http.Request, body []byte) {
	var req responsesRequest
	if e := s.decode(body, &req, responsesFields); e != nil {
		writeError(w, e)
		return
	}
	var prev []chatMessage
	if req.PreviousResponseID != nil {
		if s.responsesStore == nil {
			writeError(w, invalid("previous_response_id", "previous_response_id needs the server to keep responses (serve --responses-store N); send the conversation in input"))
			return
		}
		stored, ok := s.responsesStore.get(*req.PreviousResponseID)
		if !ok {
			writeError(w, invalid("previous_response_id", "previous response %q not found (the server keeps the last %d)", *req.PreviousResponseID, s.responsesStore.max))
			return
		}
		prev = stored.turns
	}
	creq, turns, e := req.chatRequest(prev)
	if e != nil {
		writeError(w, e)
		return
	}
	store := s.responsesStore != nil && (req.Store == nil || *req.Store)
	run, e := s.startChat(r, creq, -1)
	if e != nil {
		if e.Param != nil { // the chat API's names for this API's fields
			if name, ok := map[string]string{"response_format": "text", "max_tokens": "max_output_tokens", "messages": "input"}[*e.Param]; ok {
				e.Param = &name
			}
		}
		writeError(w, e)
		return
	}
	j, turn := run.jobs[0], run.turns[0]
	resp := &responseObject{
		ID: s.newID("resp"), Object: "response", CreatedAt: s.opts.Clock.Now().Unix(), Status: "in_progress", Instructions: req.Instructions,
		MaxOutputTokens: req.MaxOutputTokens, Model: req.Model, Output: []outputItem{}, ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		Temperature: req.Temperature, TopP: req.TopP, ToolChoice: req.ToolChoice, Tools: req.Tools, Metadata: req.Metadata,
		Text: responseText{Format: json.RawMessage(`{"type": "text"}`)}, Store: store,
	}
	keep := func() { // the response, for previous_response_id and GET
		if store && (resp.Status == "completed" || resp.Status == "incomplete") {
			s.responsesStore.put(resp, append(slices.Clone(turns), outputTurns(resp.Output)...))
		}
	}
	if len(resp.ToolChoice) == 0 {
		resp.ToolChoice = json.RawMessage(`"auto"`)
	}
	if len(resp.Tools) == 0 || string(resp.Tools) == "null" {
		resp.Tools = json.RawMessage(`[]`)
	}
	if req.Text != nil && len(req.Text.Format) > 0 {
		resp.Text.Format = req.Text.Format
	}
	b := &responseBuilder{s: s, resp: resp, open: -1}
	prompt := len(run.prompts[0])
	if !req.Stream {
		if e := s.collect(r.Context(), run.jobs); e != nil {
			writeError(w, e)
			return
		}
		_ = b.add(turn, j.text, true)
		b.finish(j, prompt)
		keep()
		writeJSON(w, http.StatusOK, resp)
		return
	}
	out := newSSE(w)
	b.emit = func(ev responseEvent) error { return out.event(ev.Type, ev) }
	snapshot := func() *responseObject { c := *resp; c.Output = append([]outputItem(nil), resp.Output...); return &c }
	if b.send(responseEvent{Type: "response.created", Response: snapshot()}) != nil ||
		b.send(responseEvent{Type: "response.in_progress", Response: snapshot()}) != nil {
		return
	}
	for ev := range s.fanIn(r.Context(), run.jobs) {
		j.usage = ev.ev.Usage
		if ev.ev.Finish == engine.FinishError {
			resp.Status, resp.Error = "failed", internal(ev.ev.Err)
			_ = b.send(responseEvent{Type: "response.failed", Response: snapshot()})
			return
		}
		j.finish = ev.ev.Finish
		if b.add(turn, ev.ev.Text, ev.ev.Finish != "") != nil {
			return // the client went away; fanIn aborts the choice
		}
	}
	if r.Context().Err() != nil {
		return
	}
	b.finish(j, prompt)
	keep()
	done := map[string]string{"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}[resp.Status]
	_ = b.send(responseEvent{Type: done, Response: snapshot()})
}
