package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode"

	"github.com/gearboxlm/gearbox/chat"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/reasoning"
)

type chatRequest struct {
	commonParams
	Messages            []chatMessage   `json:"messages"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	// ContinueFinalMessage renders the last message open-ended, with
	// nothing of the template after its text, so that the model goes on
	// with it (vLLM's; a prefilled start of the answer).
	ContinueFinalMessage bool           `json:"continue_final_message"`
	ChatTemplateKwargs   map[string]any `json:"chat_template_kwargs"`
	// Documents are handed to the template as its documents variable
	// (vLLM's; the RAG templates of Command R and Granite read them).
	Documents json.RawMessage `json:"documents"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []toolCall      `json:"tool_calls"`   // assistant turns
	ToolCallID string          `json:"tool_call_id"` // tool turns
}

// toolCall is OpenAI's tool call, in requests and responses; Index is
// set in streamed deltas only.
type toolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"` // JSON text
}

var chatFields = knownFields(append([]string{"messages", "logprobs", "top_logprobs", "max_completion_tokens", "tools",
	"tool_choice", "parallel_tool_calls", "add_generation_prompt", "continue_final_message", "chat_template_kwargs", "documents"}, commonFieldNames...)...)

type chatDelta struct {
	Role string `json:"role,omitempty"`
	thinking
	Content   *string    `json:"content,omitempty"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

// thinking is a reasoning model's thought (--reasoning-parser), under
// vLLM's name and its older one, which clients still read.
type thinking struct {
	Reasoning        *string `json:"reasoning,omitempty"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

func thought(s *string) thinking { return thinking{s, s} }

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *chatOut      `json:"message,omitempty"`
	Delta        *chatDelta    `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatOut struct {
	Role string `json:"role"`
	thinking
	Content   *string    `json:"content"` // null beside tool calls and no text
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatTokenLogprob struct {
	Token       string             `json:"token"`
	Logprob     float64            `json:"logprob"`
	Bytes       []int              `json:"bytes"`
	TopLogprobs []chatTokenLogprob `json:"top_logprobs,omitempty"`
}

type chatResponse struct {
	ID             string         `json:"id"`
	Object         string         `json:"object"`
	Created        int64          `json:"created"`
	Model          string         `json:"model"`
	Choices        []chatChoice   `json:"choices"`
	Usage          *usage         `json:"usage,omitempty"`
	PromptLogprobs promptLogprobs `json:"prompt_logprobs,omitempty"` // vLLM's, with prompt_logprobs: the rendered prompt's
}

// chatCompletions serves POST /v1/chat/completions.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, body []byte) {
	var req chatRequest
	if e := s.decode(body, &req, chatFields); e != nil {
		writeError(w, e)
		return
	}
	logprobs := -1
	if req.Logprobs {
		logprobs = 0
		if req.TopLogprobs != nil {
			if *req.TopLogprobs < 0 || *req.TopLogprobs > maxLogprobs {
				writeError(w, invalid("top_logprobs", "top_logprobs must be in [0, %d], got %d", maxLogprobs, *req.TopLogprobs))
				return
			}
			logprobs = *req.TopLogprobs
		}
	} else if req.TopLogprobs != nil {
		writeError(w, invalid("top_logprobs", "top_logprobs requires logprobs: true"))
		return
	}
	if req.MaxCompletionTokens != nil {
		if req.MaxTokens != nil && *req.MaxTokens != *req.MaxCompletionTokens {
			writeError(w, invalid("max_completion_tokens", "max_tokens and max_completion_tokens disagree"))
			return
		}
		req.MaxTokens = req.MaxCompletionTokens
	}
	run, e := s.startChat(r, &req, logprobs)
	if e != nil {
		writeError(w, e)
		return
	}
	jobs, prompts, turns := run.jobs, run.prompts, run.turns
	id, created := s.newID("chatcmpl"), s.opts.Clock.Now().Unix()
	if req.Stream {
		var first []any
		for _, j := range jobs {
			empty := ""
			first = append(first, chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
				Choices: []chatChoice{{Index: j.index, Delta: &chatDelta{Role: "assistant", Content: &empty}}}})
		}
		chunk := func(ev event) any {
			turn := turns[ev.job.index]
			thinking, content, calls := turn.next(ev.ev.Text, ev.ev.Finish != "", true)
			withLogprobs := logprobs >= 0 && len(ev.ev.Logprobs) > 0
			var prompt promptLogprobs
			if req.PromptLogprobs != nil && ev.ev.PromptLogprobs != nil && ev.job.index == 0 { // one prompt for every choice
				prompt = s.promptLogprobsOf(&req.commonParams, ev.ev.PromptLogprobs, *req.PromptLogprobs)
			}
			if thinking == nil && content == nil && calls == nil && ev.ev.Finish == "" && !withLogprobs && prompt == nil {
				return nil
			}
			ch := chatChoice{Index: ev.job.index, Delta: &chatDelta{thinking: thought(thinking), Content: content, ToolCalls: calls}, FinishReason: turn.finishReason(ev.ev.Finish)}
			if withLogprobs {
				ch.Logprobs = s.chatLogprobs(&req.commonParams, ev.ev)
			}
			return chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model, Choices: []chatChoice{ch}, PromptLogprobs: prompt,
				Usage: req.chunkUsage(ev.ev.Usage)}
		}
		var usageChunk func() any
		if req.includeUsage() {
			usageChunk = func() any {
				u := totalUsage(jobs, prompts)
				return chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model, Choices: []chatChoice{}, Usage: &u}
			}
		}
		s.streamJobs(w, r, jobs, first, chunk, usageChunk)
		return
	}
	if e := s.collect(r.Context(), jobs); e != nil {
		writeError(w, e)
		return
	}
	resp := chatResponse{ID: id, Object: "chat.completion", Created: created, Model: req.Model}
	if req.PromptLogprobs != nil {
		resp.PromptLogprobs = s.promptLogprobsOf(&req.commonParams, jobs[0].promptLP, *req.PromptLogprobs)
	}
	for _, j := range jobs {
		turn := turns[j.index]
		thinking, content, calls := turn.next(j.text, true, false)
		if content == nil && calls == nil {
			empty := ""
			content = &empty
		}
		ch := chatChoice{Index: j.index, Message: &chatOut{Role: "assistant", thinking: thought(thinking), Content: content, ToolCalls: calls}, FinishReason: turn.finishReason(j.finish)}
		if logprobs >= 0 {
			ch.Logprobs = s.chatLogprobs(&req.commonParams, engine.Event{Tokens: j.tokens, Logprobs: j.logprobs})
		}
		resp.Choices = append(resp.Choices, ch)
	}
	u := totalUsage(jobs, prompts)
	resp.Usage = &u
	writeJSON(w, http.StatusOK, resp)
}

// chatRun is a chat request admitted to the engine: its prompt, its
// choices, and the reader of each choice's text.
type chatRun struct {
	prompts [][]int
	jobs    []*job
	turns   []*chatTurn // by job index
}

// startChat validates a chat request (logprobs: the top alternatives
// asked for, -1 for none), renders its prompt and submits its choices.
func (s *Server) startChat(r *http.Request, req *chatRequest, logprobs int) (*chatRun, *apiError) {
	req.withDefaults(s.opts.Defaults)
	g, e := req.validate(logprobs)
	if e == nil {
		g.tier, e = s.resolveTier(r, req.SLOTier)
	}
	if e != nil {
		return nil, e
	}
	if g.adapter, e = s.resolveModel(req.Model); e != nil {
		return nil, e
	}
	if e := req.checkBeam(&g, logprobs); e != nil {
		return nil, e
	}
	tools, e := s.parseTools(req, &g)
	if e != nil {
		return nil, e
	}
	var sent json.RawMessage
	if len(tools.functions) > 0 {
		sent = req.Tools
	}
	kwargs, e := withDocuments(req.ChatTemplateKwargs, req.Documents)
	if e != nil {
		return nil, e
	}
	text, e := s.renderChat(req.Messages, sent, req.AddGenerationPrompt, req.ContinueFinalMessage, kwargs)
	if e != nil {
		return nil, e
	}
	if f := g.format; f != nil && !f.Free() && s.opts.ReasoningParser != "" && reasoning.ThinksFirst(text) {
		// The format holds the answer after the thinking, as vLLM applies
		// structured output once reasoning has ended.
		g.format = f.AfterThinking(reasoning.End)
	}
	run := &chatRun{prompts: [][]int{s.opts.Tokenizer.Encode(text, false)}}
	defaultMax := func(n int) int { return s.opts.Engine.MaxModelLen() - n }
	if req.UseBeamSearch { // finished jobs, which collect passes over
		run.jobs, e = s.beamJobs(r.Context(), run.prompts, g, defaultMax, req.LengthPenalty, "messages")
	} else {
		run.jobs, e = s.start(run.prompts, g, defaultMax, "messages")
	}
	if e != nil {
		return nil, e
	}
	for range run.jobs {
		run.turns = append(run.turns, s.newTurn(tools, g, text))
	}
	return run, nil
}

// renderChat renders a conversation into the prompt text with the chat
// template: tools (nil for none) as the request sent them, for templates
// that list them; addGen is add_generation_prompt (default true, false
// with continueFinal); continueFinal is continue_final_message; kwargs
// are chat_template_kwargs, which may not set the template's own
// variables.
func (s *Server) renderChat(messages []chatMessage, tools json.RawMessage, addGen *bool, continueFinal bool, kwargs map[string]any) (string, *apiError) {
	if s.opts.ChatTemplate == nil {
		return "", invalid("messages", "this model has no chat template; start the server with --chat-template FILE or use /v1/completions")
	}
	if continueFinal {
		if addGen != nil && *addGen {
			return "", invalid("continue_final_message", "continue_final_message and add_generation_prompt cannot both be true")
		}
		no := false
		addGen = &no
	}
	msgs, e := parseMessages(messages)
	if e != nil {
		return "", e
	}
	extra := map[string]any{}
	for k, v := range kwargs {
		switch k {
		case "messages", "add_generation_prompt", "bos_token", "eos_token", "tools":
			return "", invalid("chat_template_kwargs", "chat_template_kwargs may not set %q", k)
		}
		extra[k] = v
	}
	if tools != nil {
		extra["tools"] = tools // as sent: templates print the schemas with tojson, keys in order
	}
	opts := chat.Options{AddGenerationPrompt: addGen == nil || *addGen, BOSToken: s.opts.BOS, EOSToken: s.opts.EOS, Extra: extra}
	text, err := s.opts.ChatTemplate.Render(msgs, opts)
	var raised *chat.RaiseError
	var value *chat.ValueError
	var limit *chat.LimitError
	switch {
	case errors.As(err, &raised):
		return "", invalid("messages", "%v", err) // the template rejected the conversation
	case errors.As(err, &limit): // a conversation too large to render within the limits
		return "", invalid("messages", "%v", err)
	case errors.As(err, &value): // a message, the tools or a kwarg the template cannot be given
		param := "chat_template_kwargs"
		switch {
		case strings.HasPrefix(value.Where, "messages"):
			param = "messages"
		case value.Where == `Options.Extra["tools"]`:
			param = "tools"
		}
		return "", invalid(param, "%v", err)
	case err != nil:
		return "", internal(fmt.Errorf("chat template: %w", err))
	}
	if continueFinal {
		return continueFinalMessage(text, msgs[len(msgs)-1].Content)
	}
	return text, nil
}

// withDocuments adds a request's documents (vLLM's: a list of objects
// of strings; absent or null for none) to its template variables, as
// sent, so a template that walks a document's items sees its keys in the
// request's order. chat_template_kwargs may not set documents beside
// them.
func withDocuments(kwargs map[string]any, docs json.RawMessage) (map[string]any, *apiError) {
	if len(docs) == 0 || string(docs) == "null" {
		return kwargs, nil
	}
	var check []map[string]string
	if err := json.Unmarshal(docs, &check); err != nil {
		return nil, invalid("documents", "documents must be a list of objects of strings: %v", err)
	}
	if _, ok := kwargs["documents"]; ok {
		return nil, invalid("chat_template_kwargs", "chat_template_kwargs may not set documents beside the request's documents")
	}
	out := make(map[string]any, len(kwargs)+1)
	for k, v := range kwargs {
		out[k] = v
	}
	out["documents"] = docs
	return out, nil
}

// continueFinalMessage cuts the rendered chat after the last occurrence of
// the final message's text, as transformers' apply_chat_template does
// with continue_final_message: the text is found with its surrounding
// space trimmed; where the template kept it as sent (no leading space,
// trailing space kept) the cut keeps its trailing space, else the cut is
// right after its last non-space character.
func continueFinalMessage(rendered, final string) (string, *apiError) {
	at := strings.LastIndex(rendered, strings.TrimSpace(final))
	if at < 0 {
		return "", invalid("continue_final_message", "the final message does not appear in the chat the template renders, so it cannot be continued")
	}
	if lead := strings.TrimLeftFunc(final, unicode.IsSpace); rendered[at:min(len(rendered), at+len(lead))] == final {
		return rendered[:at+len(lead)], nil
	}
	return rendered[:at+len(strings.TrimSpace(final))], nil
}

// parseMessages validates OpenAI messages and flattens text content parts.
func parseMessages(in []chatMessage) ([]chat.Message, *apiError) {
	if len(in) == 0 {
		return nil, invalid("messages", "messages must be a non-empty list")
	}
	out := make([]chat.Message, 0, len(in))
	for i, m := range in {
		switch m.Role {
		case "system", "user", "assistant", "developer", "tool":
		case "":
			return nil, invalid("messages", "messages[%d].role is required", i)
		default:
			return nil, invalid("messages", "messages[%d].role %q is not supported (system, developer, user, assistant, tool)", i, m.Role)
		}
		if len(m.ToolCalls) > 0 && m.Role != "assistant" {
			return nil, invalid("messages", "messages[%d]: only assistant messages carry tool_calls", i)
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		msg := chat.Message{Role: role, Name: m.Name, ToolCallID: m.ToolCallID}
		var e *apiError
		if msg.ToolCalls, e = messageToolCalls(m.ToolCalls, i); e != nil {
			return nil, e
		}
		if len(msg.ToolCalls) == 0 || len(m.Content) > 0 && string(m.Content) != "null" { // an assistant's calls need no content
			if msg.Content, e = messageContent(m.Content, i); e != nil {
				return nil, e
			}
		}
		out = append(out, msg)
	}
	return out, nil
}

func messageContent(raw json.RawMessage, i int) (string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", invalid("messages", "messages[%d].content is required", i)
	}
	return textContent(raw, fmt.Sprintf("messages[%d].content", i), "messages", "text")
}

// textContent reads a message's content, a string or a list of parts of
// the given text types, joined by newlines; where names it (and param
// its field) in errors.
func textContent(raw json.RawMessage, where, param string, types ...string) (string, *apiError) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(param, "%s must be a string or a list of content parts", where)
	}
	var b strings.Builder
	for j, p := range parts {
		if !slices.Contains(types, p.Type) {
			return "", invalid(param, "%s[%d]: content type %q is not supported (%s)", where, j, p.Type, strings.Join(types, ", "))
		}
		if j > 0 {
			b.WriteString("\n")
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func (s *Server) chatLogprobs(c *commonParams, ev engine.Event) *chatLogprobs {
	lp := &chatLogprobs{Content: []chatTokenLogprob{}}
	entry := func(id int, x float32) chatTokenLogprob {
		t := s.tokenName(c, id)
		b := make([]int, len(t))
		for i := range t {
			b[i] = int(t[i])
		}
		return chatTokenLogprob{Token: t, Logprob: logprob(x), Bytes: b}
	}
	for i, res := range ev.Logprobs {
		c := entry(ev.Tokens[i], res.Logprob)
		c.TopLogprobs = []chatTokenLogprob{}
		for _, alt := range res.Top {
			c.TopLogprobs = append(c.TopLogprobs, entry(alt.Token, alt.Logprob))
		}
		lp.Content = append(lp.Content, c)
	}
	return lp
}
