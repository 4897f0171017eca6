package server

import (
	"encoding/json"

	"github.com/gearboxlm/gearbox/chat"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/reasoning"
	"github.com/gearboxlm/gearbox/toolcall"
)

// chatTools is a chat request's tool calling: the functions offered,
// tool_choice, and parallel_tool_calls.
type chatTools struct {
	functions []toolcall.Function
	choice    toolcall.Choice
	parallel  bool
}

// parseTools reads tools, tool_choice and parallel_tool_calls, and puts
// the format a "required" or named choice holds the generation to in g.
func (s *Server) parseTools(req *chatRequest, g *generation) (chatTools, *apiError) {
	var t chatTools
	var err error
	if t.functions, err = toolcall.ParseTools(req.Tools); err != nil {
		return t, invalid("tools", "%v", err)
	}
	if t.choice, err = toolcall.ParseChoice(req.ToolChoice, t.functions); err != nil {
		return t, invalid("tool_choice", "%v", err)
	}
	t.parallel = req.ParallelToolCalls == nil || *req.ParallelToolCalls
	if t.choice.Mode == toolcall.Auto && s.opts.ToolSyntax == "" {
		return t, invalid("tool_choice", `tool_choice "auto" (the default with tools) needs the syntax this model writes calls in, which its chat template does not show: start the server with --tool-call-parser (%q), or send tool_choice "required" or {"type": "function", "function": {"name": ...}}`, toolcall.Syntaxes)
	}
	if t.choice.Mode == toolcall.Auto && s.opts.ToolSyntax.NeedsSpecialTokens() {
		g.special = true // the calls' marker is a special token
	}
	format, err := t.choice.Format(t.functions, t.parallel, s.opts.ToolSyntax)
	if err != nil {
		return t, invalid("tools", "%v", err)
	}
	if format == nil && g.format == nil && !s.opts.FreeToolCalls {
		format = t.choice.AutoFormat(t.functions, s.opts.ToolSyntax)
	}
	if format != nil {
		if g.format != nil {
			return t, invalid("tool_choice", "tool_choice %s and another output format (response_format, guided_json, guided_regex, guided_choice, structured_outputs) are both set; send one", req.ToolChoice)
		}
		g.format = format
	}
	return t, nil
}

// chatTurn reads one choice's text into its message: thinking (with a
// reasoning parser), content and tool calls.
type chatTurn struct {
	tools  chatTools
	think  *reasoning.Reader // nil: no thinking to split off
	reader *toolcall.Reader
	ids    []string // the calls' ids, by index
	newID  func() string
}

// newTurn starts reading a choice that continues prompt. Under an output
// format that holds from the first token (the prompt closed the thinking)
// the model writes the format, so there is no thinking to split off.
func (s *Server) newTurn(t chatTools, g generation, prompt string) *chatTurn {
	turn := &chatTurn{tools: t, reader: toolcall.NewReader(t.choice, s.opts.ToolSyntax, t.functions), newID: func() string { return s.newID("call") }}
	if s.opts.ReasoningParser != "" && (g.format == nil || g.format.Free() || g.format.ThinksFirst()) {
		turn.think = reasoning.NewReader(s.opts.ReasoningParser, prompt)
	}
	return turn
}

// next reads the next piece of the choice's text, and its end when end is
// set, into the message's thinking and content (nil when there is none)
// and tool calls in OpenAI's shape; streamed calls carry their index. A
// call's id and type come with its first piece. Without
// parallel_tool_calls, calls after the first are dropped.
func (t *chatTurn) next(text string, end, stream bool) (thinking, content *string, calls []toolCall) {
	answer := text
	if t.think != nil {
		rd := t.think.Write(text)
		if end {
			e := t.think.Close()
			rd.Reasoning += e.Reasoning
			rd.Content += e.Content
		}
		if rd.Reasoning != "" {
			thinking = &rd.Reasoning
		}
		answer = rd.Content
	}
	d := t.reader.Write(answer)
	if end {
		e := t.reader.Close()
		d.Content += e.Content
		d.Calls = append(d.Calls, e.Calls...)
	}
	if d.Content != "" {
		content = &d.Content
	}
	for _, c := range d.Calls {
		if c.Index > 0 && !t.tools.parallel {
			continue
		}
		var out toolCall
		if c.Index == len(t.ids) {
			t.ids = append(t.ids, t.newID())
			out.ID, out.Type = t.ids[c.Index], "function"
		}
		out.Function = functionCall{Name: c.Name, Arguments: c.Arguments}
		if stream {
			out.Index = &c.Index
			calls = append(calls, out)
			continue
		}
		if out.ID != "" {
			calls = append(calls, out)
		} else { // the rest of a call's arguments
			calls[len(calls)-1].Function.Arguments += c.Arguments
		}
	}
	return thinking, content, calls
}

// finishReason is OpenAI's for the turn: "tool_calls" when it made calls
// of its own choosing ("auto" or "required") and stopped by itself.
func (t *chatTurn) finishReason(f string) *string {
	if f == engine.FinishStop && len(t.ids) > 0 && t.tools.choice.Mode != toolcall.Named {
		r := "tool_calls"
		return &r
	}
	return finishReason(f)
}

// messageToolCalls reads an assistant turn's tool_calls, whose arguments
// must be JSON: templates get them decoded.
func messageToolCalls(in []toolCall, i int) ([]chat.ToolCall, *apiError) {
	var out []chat.ToolCall
	for k, c := range in {
		if c.Type != "" && c.Type != "function" {
			return nil, invalid("messages", "messages[%d].tool_calls[%d].type %q is not supported (function)", i, k, c.Type)
		}
		if c.Function.Name == "" {
			return nil, invalid("messages", "messages[%d].tool_calls[%d].function.name is required", i, k)
		}
		args := c.Function.Arguments
		if args == "" {
			args = "{}"
		}
		if !json.Valid([]byte(args)) {
			return nil, invalid("messages", "messages[%d].tool_calls[%d].function.arguments must be a string of JSON", i, k)
		}
		out = append(out, chat.ToolCall{ID: c.ID, Function: chat.FunctionCall{Name: c.Function.Name, Arguments: json.RawMessage(args)}})
	}
	return out, nil
}
