package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/gearboxlm/gearbox/clock"
)

// Message is one turn of a conversation. Templates see it as vLLM
// passes OpenAI messages: role and content (a string, "" where the
// request's was null), and tool_calls, tool_call_id and name only when
// set.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"` // plain text
	// ToolCalls are the calls an assistant turn made.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a "tool" turn answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name on a "tool" turn, or a participant's.
	Name string `json:"name,omitempty"`
}

// ToolCall is one function call of an assistant turn, in OpenAI's shape.
// Templates see {"id", "type": "function", "function": {"name",
// "arguments"}} with arguments decoded (a dict, keys in order), as vLLM
// passes them: chat templates write arguments with tojson.
type ToolCall struct {
	ID       string       `json:"id"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function a ToolCall calls and its arguments.
type FunctionCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"` // a JSON value, usually an object
}

// Options are the variables and limits of one Render.
type Options struct {
	// AddGenerationPrompt is add_generation_prompt: end the text with the
	// header of an assistant turn.
	AddGenerationPrompt bool
	// BOSToken and EOSToken are bos_token and eos_token, the text of the
	// model's special tokens (tokenizer_config.json bos_token, eos_token).
	BOSToken, EOSToken string
	// Extra holds more template variables, such as enable_thinking for
	// Qwen3 or date_string for Llama 3.1. Values may be nil, bool,
	// numbers, strings, slices, maps with string keys (their keys are
	// sorted), json.RawMessage (decoded with its key order kept, which
	// tojson then keeps: use it for tool schemas), Message, or structs
	// (through encoding/json). Extra may not override messages,
	// add_generation_prompt, bos_token or eos_token.
	Extra map[string]any
	// Clock is what strftime_now reads; nil is the wall clock.
	Clock clock.Clock
	// MaxSteps bounds the work of one render, in evaluated nodes and
	// loop iterations; 0 means DefaultMaxSteps.
	MaxSteps int
	// MaxBytes bounds the rendered text and every string or list the
	// template builds, in bytes; 0 means DefaultMaxBytes.
	MaxBytes int
}

// Default limits of a render. A Llama 3 or Qwen3 template spends about
// 100 steps per message.
const (
	DefaultMaxSteps = 1_000_000
	DefaultMaxBytes = 16 << 20
)

// Template is a parsed chat template. It is immutable and safe for
// concurrent use.
type Template struct {
	body []node
}

// Parse parses a chat template (the chat_template string of a
// tokenizer_config.json). Syntax errors are *SyntaxError, with the line.
func Parse(source string) (t *Template, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("chat: parser panic (a bug): %v\n%s", p, debug.Stack())
		}
	}()
	body, err := parse(source)
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// Render renders msgs as transformers' apply_chat_template(msgs,
// tokenize=False) does. The template sees messages (dicts with role and
// content), add_generation_prompt, bos_token, eos_token, tools and
// documents (None unless set in Extra), the entries of Extra, and the
// functions raise_exception, strftime_now, range, dict and namespace.
//
// Errors: a template calling raise_exception gives *RaiseError with the
// template's message; exceeding the limits gives *LimitError; a message
// or Extra value a template cannot be given gives *ValueError; other
// failures (an undefined value used, a type error) give an error naming
// the template line. Render never panics.
func (t *Template) Render(msgs []Message, opts Options) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("chat: template render panic (a bug): %v\n%s", p, debug.Stack())
		}
	}()
	r := &renderer{maxSteps: opts.MaxSteps, maxBytes: opts.MaxBytes, now: clock.Real{}.Now}
	if r.maxSteps <= 0 {
		r.maxSteps = DefaultMaxSteps
	}
	if r.maxBytes <= 0 {
		r.maxBytes = DefaultMaxBytes
	}
	if opts.Clock != nil {
		r.now = opts.Clock.Now
	}
	g := newFrame(nil)
	for k, v := range globals() {
		g.set(k, v)
	}
	g.set("tools", nil)
	g.set("documents", nil)
	for k, v := range opts.Extra {
		switch k {
		case "messages", "add_generation_prompt", "bos_token", "eos_token":
			return "", fmt.Errorf("chat: Options.Extra may not set %q", k)
		}
		x, err := fromGo(v)
		if err != nil {
			return "", &ValueError{Where: fmt.Sprintf("Options.Extra[%q]", k), Err: err}
		}
		g.set(k, x)
	}
	list := make([]any, len(msgs))
	for i, m := range msgs {
		v, err := messageValue(m)
		if err != nil {
			return "", &ValueError{Where: fmt.Sprintf("messages[%d]", i), Err: err}
		}
		list[i] = v
	}
	g.set("messages", list)
	g.set("add_generation_prompt", opts.AddGenerationPrompt)
	g.set("bos_token", opts.BOSToken)
	g.set("eos_token", opts.EOSToken)

	var b strings.Builder
	if _, err := r.execBody(&b, t.body, newFrame(g)); err != nil {
		return "", err
	}
	return b.String(), nil
}

// FromTokenizerConfig returns the chat template of a tokenizer_config.json:
// its chat_template string, or from the list form
// [{"name": ..., "template": ...}] the one named "default". It returns ""
// when the file has no chat_template (newer checkpoints keep it in a
// separate chat_template.jinja file).
func FromTokenizerConfig(data []byte) (string, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("chat: tokenizer_config.json: %w", err)
	}
	raw := cfg.ChatTemplate
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("chat: tokenizer_config.json: chat_template is neither a string nor a list of {name, template}")
	}
	var names []string
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
		names = append(names, n.Name)
	}
	return "", fmt.Errorf("chat: tokenizer_config.json: no chat template named \"default\" (have %q)", names)
}
