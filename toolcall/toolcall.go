// Package toolcall reads the tool calling of OpenAI's chat API: the tools
// a request offers, its tool_choice, and the calls in a model's output.
//
// A call is made one of two ways. Under tool_choice "required" or a named
// function the generation is held to a format (package structured): the
// function's arguments, or vLLM's array of {"name", "parameters"} calls,
// so every choice is well-formed calls. Under "auto" the model writes
// freely and its own syntax marks the calls: Hermes' <tool_call> tags
// (Qwen 2.5 and 3, Hermes, and most open models since), Llama 3's bare
// JSON object, or Mistral's [TOOL_CALLS]. A Reader splits the text as it streams into content and
// calls; text that looks like a call but is not one (bad JSON, a function
// the request did not offer) stays content, so nothing the model wrote
// is lost.
package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gearboxlm/gearbox/structured"
)

// Function is one tool a request offers (tools[i].function).
type Function struct {
	Name        string
	Description string
	Parameters  json.RawMessage // a JSON Schema; nil when the function takes none
}

// validName is OpenAI's rule for function names.
var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ParseTools reads a request's tools: a list of {"type": "function",
// "function": {"name", "description", "parameters", "strict"}}, names
// unique and as OpenAI allows them. Null or absent is no tools.
func ParseTools(raw json.RawMessage) ([]Function, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("tools must be a list of {\"type\": \"function\", \"function\": {...}}")
	}
	var out []Function
	for i, item := range list {
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
				Strict      *bool           `json:"strict"`
			} `json:"function"`
		}
		if err := json.Unmarshal(item, &t); err != nil || t.Function == nil {
			return nil, fmt.Errorf("tools[%d] must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}", i)
		}
		// encoding/json matches keys without regard to case; the chat
		// template reads the tools as sent, by their exact keys.
		if k, want := miscased(item, "type", "function"); k != "" {
			return nil, fmt.Errorf("tools[%d]: key %q must be spelled %q", i, k, want)
		}
		var fn map[string]json.RawMessage
		_ = json.Unmarshal(item, &fn)
		if k, want := miscased(fn["function"], "name", "description", "parameters", "strict"); k != "" {
			return nil, fmt.Errorf("tools[%d].function: key %q must be spelled %q", i, k, want)
		}
		if t.Type != "function" {
			return nil, fmt.Errorf("tools[%d].type %q is not supported (function)", i, t.Type)
		}
		f := t.Function
		if !validName.MatchString(f.Name) {
			return nil, fmt.Errorf("tools[%d].function.name %q must be 1 to 64 letters, digits, underscores or dashes", i, f.Name)
		}
		if slices.ContainsFunc(out, func(g Function) bool { return g.Name == f.Name }) {
			return nil, fmt.Errorf("tools[%d]: function %q is offered twice", i, f.Name)
		}
		params := f.Parameters
		if string(params) == "null" {
			params = nil
		}
		if len(params) > 0 && params[0] != '{' {
			return nil, fmt.Errorf("tools[%d].function.parameters must be a JSON Schema object", i)
		}
		out = append(out, Function{Name: f.Name, Description: f.Description, Parameters: params})
	}
	return out, nil
}

// miscased returns a key of the JSON object raw that matches one of keys
// only when case is ignored, and that key; "" when there is none.
func miscased(raw json.RawMessage, keys ...string) (got, want string) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return "", ""
	}
	for k := range m {
		for _, w := range keys {
			if k != w && strings.EqualFold(k, w) {
				return k, w
			}
		}
	}
	return "", ""
}

// Mode is what tool_choice asks of a generation.
type Mode uint8

const (
	None     Mode = iota // no calls: the text is content
	Auto                 // the model decides; its syntax marks the calls
	Required             // one or more calls, held to a format
	Named                // one call of the named function, held to its arguments
)

// Choice is a request's tool_choice.
type Choice struct {
	Mode Mode
	Name string // Named: the function
}

// ParseChoice reads tool_choice: "none", "auto", "required" or {"type":
// "function", "function": {"name": ...}} naming one of tools. Absent or
// null is "auto" when there are tools and "none" when there are none, as
// in OpenAI's API.
func ParseChoice(raw json.RawMessage, tools []Function) (Choice, error) {
	if len(raw) == 0 || string(raw) == "null" {
		if len(tools) == 0 {
			return Choice{Mode: None}, nil
		}
		return Choice{Mode: Auto}, nil
	}
	var c Choice
	var word string
	if json.Unmarshal(raw, &word) == nil {
		switch word {
		case "none":
			return Choice{Mode: None}, nil
		case "auto":
			c.Mode = Auto
		case "required":
			c.Mode = Required
		default:
			return c, fmt.Errorf(`tool_choice %q is not one of "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`, word)
		}
	} else {
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
			return c, fmt.Errorf(`tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`)
		}
		c = Choice{Mode: Named, Name: named.Function.Name}
		if !slices.ContainsFunc(tools, func(f Function) bool { return f.Name == c.Name }) {
			return c, fmt.Errorf("tool_choice names function %q, which tools does not offer", c.Name)
		}
	}
	if len(tools) == 0 {
		return c, fmt.Errorf("tool_choice %s needs tools", raw)
	}
	return c, nil
}

// Format is the output format that makes the choice's calls: nil for
// "none" and "auto" (free text), the named function's arguments, or for
// "required" nothing but calls, at least one and at most one unless
// parallel: in the model's own syntax where it tags its calls (Hermes'
// <tool_call> blocks, which the Reader then reads), else vLLM's array of
// {"name", "parameters"}.
func (c Choice) Format(tools []Function, parallel bool, syntax Syntax) (*structured.Format, error) {
	switch c.Mode {
	case Named:
		i := slices.IndexFunc(tools, func(f Function) bool { return f.Name == c.Name })
		return structured.ToolArguments(structured.Tool{Name: c.Name, Parameters: tools[i].Parameters})
	case Required:
		maxCalls := 0
		if !parallel {
			maxCalls = 1
		}
		if syntax == Hermes {
			return structured.TaggedToolCallsOnly(openTag, closeTag, structuredTools(tools), maxCalls)
		}
		return structured.ToolCalls(structuredTools(tools), maxCalls)
	}
	return nil, nil
}

func structuredTools(tools []Function) []structured.Tool {
	st := make([]structured.Tool, len(tools))
	for i, f := range tools {
		st[i] = structured.Tool{Name: f.Name, Parameters: f.Parameters}
	}
	return st
}

// AutoFormat is the format that holds a tool_choice "auto" generation's
// calls to the tools while leaving the rest of the text free, for the
// syntaxes that tag their calls (Hermes: each call an object
// {"name", "arguments"} between <tool_call> and </tool_call>); nil for
// other choices and syntaxes, and when a tool's schema is outside what
// package structured compiles (the calls are then read unconstrained).
func (c Choice) AutoFormat(tools []Function, syntax Syntax) *structured.Format {
	if c.Mode != Auto || syntax != Hermes || len(tools) == 0 {
		return nil
	}
	f, err := structured.TaggedToolCalls(openTag, closeTag, structuredTools(tools))
	if err != nil {
		return nil
	}
	return f
}

// Syntax is how a model marks its calls in free text (tool_choice "auto").
type Syntax string

const (
	// Hermes wraps each call in tags, one JSON object each:
	// <tool_call>{"name": "f", "arguments": {...}}</tool_call>.
	Hermes Syntax = "hermes"
	// Llama3JSON writes the whole message as one call, {"name": "f",
	// "parameters": {...}}, after <|python_tag|> or alone; several calls
	// are separated by ";".
	Llama3JSON Syntax = "llama3_json"
	// Mistral writes [TOOL_CALLS] and then the calls: a JSON array of
	// {"name", "arguments"} (Mistral 7B v0.3's tokenizer), or
	// name[ARGS]{...} after each [TOOL_CALLS] (newer ones). The marker is
	// a special token, so the server keeps special tokens in the text
	// (NeedsSpecialTokens).
	Mistral Syntax = "mistral"
	// Pythonic writes the whole message as a Python list of calls with
	// keyword arguments, [f(a=1, b="x"), g()] (Llama 3.2's pythonic
	// template and Llama 4, which may wrap it in <|python_start|> and
	// <|python_end|>).
	Pythonic Syntax = "pythonic"
)

// Syntaxes are the syntaxes a Reader reads, by name (vLLM's
// --tool-call-parser names).
var Syntaxes = []Syntax{Hermes, Llama3JSON, Mistral, Pythonic}

// NeedsSpecialTokens reports whether the syntax marks calls with a
// special token, which the text must keep (skip_special_tokens false).
func (s Syntax) NeedsSpecialTokens() bool { return s == Mistral }

// ParseSyntax reads a --tool-call-parser name.
func ParseSyntax(name string) (Syntax, error) {
	for _, s := range Syntaxes {
		if string(s) == name {
			return s, nil
		}
	}
	return "", fmt.Errorf("unknown tool-call parser %q (have %q)", name, Syntaxes)
}

// Detect names the syntax a chat template teaches its model, or "" when
// it teaches none: Hermes' tags, Mistral's [TOOL_CALLS], the pythonic
// list (Llama 4's "[func_name1(params_name1=params_value1, …)]"), or Llama
// 3.1's JSON with "parameters".
func Detect(template string) Syntax {
	switch {
	case strings.Contains(template, "<tool_call>"):
		return Hermes
	case strings.Contains(template, "[TOOL_CALLS]"):
		return Mistral
	case strings.Contains(template, "[func_name1(") || strings.Contains(template, pythonStart):
		return Pythonic
	case strings.Contains(template, "<|python_tag|>") || strings.Contains(template, `"parameters": `) && strings.Contains(template, "tools"):
		return Llama3JSON
	}
	return ""
}

// call is one call read from the text: its function and arguments as
// compact JSON.
type call struct {
	name, args string
}

// parseCall reads one call object, {"name": "f", "arguments": {...}} or
// with "parameters" (Llama 3, vLLM's required array); the arguments may
// also be a string holding JSON, as some models write them. It fails
// unless the function is one of names.
func parseCall(text string, names []string) (call, bool) {
	var obj struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if json.Unmarshal([]byte(text), &obj) != nil || !slices.Contains(names, obj.Name) {
		return call{}, false
	}
	args := obj.Arguments
	if len(args) == 0 {
		args = obj.Parameters
	}
	var s string
	if json.Unmarshal(args, &s) == nil {
		args = []byte(s)
	}
	var b bytes.Buffer
	if len(args) == 0 || string(args) == "null" {
		return call{name: obj.Name, args: "{}"}, true
	}
	if json.Compact(&b, args) != nil || b.Bytes()[0] != '{' {
		return call{}, false
	}
	return call{name: obj.Name, args: b.String()}, true
}
