package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

var weatherTools = []Function{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}`)},
	{Name: "get_time"},
}

func TestParseTools(t *testing.T) {
	got, err := ParseTools(json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}, "strict": true}},
		{"type": "function", "function": {"name": "ping", "parameters": null}}]`))
	if err != nil || len(got) != 2 || got[0].Name != "get_weather" || got[0].Description != "d" || string(got[0].Parameters) != `{"type": "object"}` || got[1].Parameters != nil {
		t.Fatalf("ParseTools = %+v, %v", got, err)
	}
	for _, c := range []struct{ raw, want string }{
		{`{}`, "must be a list"},
		{`[1]`, "tools[0] must be"},
		{`[{"type": "function"}]`, "tools[0] must be"},
		{`[{"type": "code_interpreter", "function": {"name": "a"}}]`, `"code_interpreter" is not supported`},
		{`[{"type": "function", "function": {"name": "a b"}}]`, "letters, digits"},
		{`[{"type": "function", "function": {"name": ""}}]`, "letters, digits"},
		{`[{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]`, "offered twice"},
		{`[{"type": "function", "function": {"name": "a", "parameters": [1]}}]`, "JSON Schema object"},
		{`[{"type": "function", "funCtion": {"name": "a"}}]`, `key "funCtion" must be spelled "function"`},
		{`[{"Type": "function", "function": {"name": "a"}}]`, `key "Type" must be spelled "type"`},
		{`[{"type": "function", "function": {"nAme": "a"}}]`, `tools[0].function: key "nAme" must be spelled "name"`},
		{`[{"type": "function", "function": {"name": "a", "Parameters": {}}}]`, `key "Parameters" must be spelled "parameters"`},
	} {
		if _, err := ParseTools(json.RawMessage(c.raw)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.raw, err, c.want)
		}
	}
}

func TestParseChoice(t *testing.T) {
	for _, c := range []struct {
		raw   string
		tools []Function
		want  Choice
		err   string
	}{
		{"", nil, Choice{Mode: None}, ""},
		{"", weatherTools, Choice{Mode: Auto}, ""},
		{"null", weatherTools, Choice{Mode: Auto}, ""},
		{`"none"`, nil, Choice{Mode: None}, ""},
		{`"none"`, weatherTools, Choice{Mode: None}, ""},
		{`"auto"`, weatherTools, Choice{Mode: Auto}, ""},
		{`"required"`, weatherTools, Choice{Mode: Required}, ""},
		{`{"type": "function", "function": {"name": "get_time"}}`, weatherTools, Choice{Mode: Named, Name: "get_time"}, ""},
		{`"auto"`, nil, Choice{}, "needs tools"},
		{`"required"`, nil, Choice{}, "needs tools"},
		{`"always"`, weatherTools, Choice{}, `"always" is not one of`},
		{`{"type": "function", "function": {"name": "nope"}}`, weatherTools, Choice{}, "does not offer"},
		{`{"type": "function"}`, weatherTools, Choice{}, "must be"},
		{`3`, weatherTools, Choice{}, "must be"},
	} {
		got, err := ParseChoice(json.RawMessage(c.raw), c.tools)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %+v, %v; want an error with %q", c.raw, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.raw, got, err, c.want)
		}
	}
}

func TestDetect(t *testing.T) {
	for tmpl, want := range map[string]Syntax{
		`{{- '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' }}`:                               Hermes,
		`{%- if tools %}Respond in the format {"name": function name, "parameters": dictionary}{% endif %}`:                            Llama3JSON,
		`{{- "<|python_tag|>" + tool_call.name }}`:                                                                                     Llama3JSON,
		`{{- "[AVAILABLE_TOOLS] " + tools|tojson + "[/AVAILABLE_TOOLS]" }}{{ "[TOOL_CALLS] " }}`:                                       Mistral,
		`you MUST put it in the format of [func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]`: Pythonic,
		`{% for m in messages %}{{ m.content }}{% endfor %}`:                                                                           "",
	} {
		if got := Detect(tmpl); got != want {
			t.Errorf("Detect(%q) = %q, want %q", tmpl, got, want)
		}
	}
	if s, err := ParseSyntax("hermes"); err != nil || s != Hermes {
		t.Errorf("ParseSyntax(hermes) = %q, %v", s, err)
	}
	if s, err := ParseSyntax("pythonic"); err != nil || s != Pythonic {
		t.Errorf("ParseSyntax(pythonic) = %q, %v", s, err)
	}
	if _, err := ParseSyntax("granite"); err == nil {
		t.Error("ParseSyntax(granite): no error")
	}
}

// message is a Reader's whole output: content and calls as "name args".
type message struct {
	content string
	calls   []string
}

// read feeds text to a fresh Reader in the given pieces and joins the
// deltas into a message, checking that each call's first piece names it.
func read(t *testing.T, choice Choice, syntax Syntax, pieces []string) message {
	t.Helper()
	r := NewReader(choice, syntax, weatherTools)
	var m message
	var args []strings.Builder
	add := func(d Delta) {
		m.content += d.Content
		for _, c := range d.Calls {
			switch {
			case c.Index == len(args):
				if c.Name == "" {
					t.Fatalf("%q: call %d starts without its name", pieces, c.Index)
				}
				args = append(args, strings.Builder{})
				m.calls = append(m.calls, c.Name)
			case c.Index != len(args)-1 || c.Name != "":
				t.Fatalf("%q: delta %+v out of order", pieces, c)
			}
			args[c.Index].WriteString(c.Arguments)
		}
	}
	for _, p := range pieces {
		add(r.Write(p))
	}
	add(r.Close())
	for i := range m.calls {
		m.calls[i] += " " + args[i].String()
	}
	if r.calls != len(m.calls) {
		t.Fatalf("%q: counted %d calls, gave out %d", pieces, r.calls, len(m.calls))
	}
	return m
}

// TestReader reads each text whole, then split at every pair of places:
// the message must not depend on how the text streams in.
func TestReader(t *testing.T) {
	auto, required := Choice{Mode: Auto}, Choice{Mode: Required}
	named := Choice{Mode: Named, Name: "get_weather"}
	for _, c := range []struct {
		choice Choice
		syntax Syntax
		text   string
		want   message
	}{
		{Choice{Mode: None}, Hermes, "Hi <tool_call>{}</tool_call> \n", message{content: "Hi <tool_call>{}</tool_call> \n"}},
		{auto, Hermes, "Just text.\n", message{content: "Just text.\n"}},
		{auto, Hermes, "a < b <tool", message{content: "a < b <tool"}},
		{auto, Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			message{calls: []string{`get_weather {"city":"Paris"}`}}},
		{auto, Hermes, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n",
			message{content: "Let me check.", calls: []string{`get_weather {"city":"Oslo"}`, "get_time {}"}}},
		{auto, Hermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": \"{\\\"zone\\\": 1}\"}</tool_call>", // arguments as a string of JSON
			message{calls: []string{`get_time {"zone":1}`}}},
		{auto, Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}", // unclosed at the end
			message{calls: []string{`get_weather {"city":"Rome"}`}}},
		{auto, Hermes, "x <tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call> y", // not offered: content
			message{content: "x <tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call> y"}},
		{auto, Hermes, "<tool_call>{\"name\": \"get_time\"</tool_call>", message{content: "<tool_call>{\"name\": \"get_time\"</tool_call>"}},
		{auto, Hermes, "<tool_call>{broken", message{content: "<tool_call>{broken"}},
		{auto, Llama3JSON, "Sunny today.", message{content: "Sunny today."}},
		{auto, Llama3JSON, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}", message{calls: []string{`get_weather {"city":"Lima"}`}}},
		{auto, Llama3JSON, "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Kyiv\"}}",
			message{calls: []string{"get_time {}", `get_weather {"city":"Kyiv"}`}}},
		{auto, Llama3JSON, "{\"a\": 1}", message{content: "{\"a\": 1}"}},
		{auto, Llama3JSON, "{\"name\": \"get_time\", \"parameters\": {}} and more", message{content: "{\"name\": \"get_time\", \"parameters\": {}} and more"}},
		{auto, Llama3JSON, "<|py", message{content: "<|py"}},
		{auto, Llama3JSON, "  ", message{content: "  "}},
		{auto, Mistral, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, {\"name\": \"get_time\", \"arguments\": {}}]",
			message{calls: []string{`get_weather {"city":"Rome"}`, "get_time {}"}}},
		{auto, Mistral, "Sure.[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}",
			message{content: "Sure.", calls: []string{"get_time {}", `get_weather {"city":"Oslo"}`}}},
		{auto, Mistral, "a [TOOL_CALLS x", message{content: "a [TOOL_CALLS x"}},
		{auto, Mistral, "[TOOL_CALLS]nope[ARGS]{}", message{content: "[TOOL_CALLS]nope[ARGS]{}"}},
		{auto, Mistral, "[TOOL_CALLS]get_time[ARGS]{} and", message{content: "[TOOL_CALLS]get_time[ARGS]{} and"}},
		{auto, Pythonic, "Sunny [today].", message{content: "Sunny [today]."}},
		{auto, Pythonic, ` [get_weather(city="Paris"), get_time()]`, message{calls: []string{`get_weather {"city":"Paris"}`, "get_time {}"}}},
		{auto, Pythonic, `<|python_start|>[get_weather(city='O\'Hare \u00e9', days=3, units=None, hourly=True, at=[1.5, -2, 1e3], opts={'a': "b", "c": []},)]<|python_end|>`,
			message{calls: []string{`get_weather {"city":"O'Hare é","days":3,"units":null,"hourly":true,"at":[1.5,-2,1000],"opts":{"a":"b","c":[]}}`}}},
		{auto, Pythonic, `[launch(x=1)]`, message{content: `[launch(x=1)]`}},                 // not offered
		{auto, Pythonic, `[get_time(zone=CET)]`, message{content: `[get_time(zone=CET)]`}},   // not a literal
		{auto, Pythonic, `[get_time(a=1, a=2)]`, message{content: `[get_time(a=1, a=2)]`}},   // a repeated keyword
		{auto, Pythonic, `[get_time()] and more`, message{content: `[get_time()] and more`}}, // not the whole message
		{auto, Pythonic, `[get_weather(city="Ro`, message{content: `[get_weather(city="Ro`}}, // cut short
		{auto, Pythonic, `[]`, message{content: `[]`}},
		{required, "", `[{"name": "get_weather", "parameters": {"city": "a]}\"{"}}, {"name":"get_time","parameters":{}}]`,
			message{calls: []string{`get_weather {"city":"a]}\"{"}`, "get_time {}"}}},
		{required, "", `[{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": {"ci`, // cut by the length limit
			message{content: `{"name": "get_weather", "parameters": {"ci`, calls: []string{"get_time {}"}}},
		{required, Hermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>",
			message{calls: []string{"get_time {}", `get_weather {"city":"Oslo"}`}}},
		{named, "", ` {"city": "Tokyo"}`, message{calls: []string{`get_weather  {"city": "Tokyo"}`}}},
		{named, "", "", message{calls: []string{"get_weather "}}},
	} {
		want := fmt.Sprint(c.want)
		if got := read(t, c.choice, c.syntax, []string{c.text}); fmt.Sprint(got) != want {
			t.Errorf("%+v %q:\n\tgot  %v\n\twant %s", c.choice, c.text, got, want)
			continue
		}
		for i := 0; i <= len(c.text); i++ {
			for j := i; j <= len(c.text); j++ {
				pieces := []string{c.text[:i], c.text[i:j], c.text[j:]}
				if got := read(t, c.choice, c.syntax, pieces); fmt.Sprint(got) != want {
					t.Fatalf("%+v %q:\n\tgot  %v\n\twant %s", c.choice, pieces, got, want)
				}
			}
		}
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []Choice{{Mode: None}, {Mode: Auto}} {
		if f, err := c.Format(weatherTools, true, Hermes); f != nil || err != nil {
			t.Errorf("%+v: %v, %v; want no format", c, f, err)
		}
	}
	for _, c := range []Choice{{Mode: Required}, {Mode: Named, Name: "get_time"}, {Mode: Named, Name: "get_weather"}} {
		if f, err := c.Format(weatherTools, false, ""); f == nil || err != nil {
			t.Errorf("%+v: %v, %v; want a format", c, f, err)
		}
	}
	if f, err := (Choice{Mode: Required}).Format(weatherTools, true, Hermes); err != nil || f.Free() {
		t.Errorf("required in Hermes' syntax: %v, free %v; want calls alone", err, f.Free())
	}
	bad := []Function{{Name: "f", Parameters: json.RawMessage(`{"type": "object", "properties": {"s": {"type": "string", "multipleOf": 2}}}`)}}
	if _, err := (Choice{Mode: Required}).Format(bad, true, ""); err == nil || !strings.Contains(err.Error(), "multipleOf") {
		t.Errorf("a schema outside the subset: %v", err)
	}
}

// TestReaderWithoutCalls: where no call may come, every piece is content
// as it arrives, whitespace included, so streams are not held back.
func TestReaderWithoutCalls(t *testing.T) {
	r := NewReader(Choice{Mode: None}, Hermes, weatherTools)
	for _, p := range []string{"Hello ", "\n", "<tool_call>", " "} {
		if d := r.Write(p); d.Content != p || len(d.Calls) != 0 {
			t.Errorf("Write(%q) = %+v", p, d)
		}
	}
	if d := r.Close(); d.Content != "" || len(d.Calls) != 0 {
		t.Errorf("Close() = %+v", d)
	}
}

// FuzzReader: any text, split anywhere, reads without a panic into the
// message it reads whole, in every mode that parses.
func FuzzReader(f *testing.F) {
	f.Add("<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call> x", uint(5), uint8(0))
	f.Add("{\"name\": \"get_time\", \"parameters\": {}}; {", uint(3), uint8(1))
	f.Add(`[{"name": "get_time", "parameters": {"a": "]}"}}, {"name`, uint(9), uint8(2))
	f.Add("ok [TOOL_CALLS]get_time[ARGS]{}", uint(7), uint8(3))
	f.Add(`[get_weather(city='a\'b', n=[1, {"x": None}]), get_time()]`, uint(11), uint8(5))
	f.Fuzz(func(t *testing.T, text string, at uint, mode uint8) {
		choice, syntax := Choice{Mode: Auto}, Hermes
		switch mode % 6 {
		case 1:
			syntax = Llama3JSON
		case 2:
			choice, syntax = Choice{Mode: Required}, "" // vLLM's array
		case 3:
			syntax = Mistral
		case 4:
			choice = Choice{Mode: Required} // in Hermes' tags
		case 5:
			syntax = Pythonic
		}
		i := int(at % uint(len(text)+1))
		whole := read(t, choice, syntax, []string{text})
		if split := read(t, choice, syntax, []string{text[:i], text[i:]}); fmt.Sprint(split) != fmt.Sprint(whole) {
			t.Fatalf("%q split at %d: %v, whole %v", text, i, split, whole)
		}
	})
}
