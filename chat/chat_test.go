package chat

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
)

func mustParse(t testing.TB, src string) *Template {
	t.Helper()
	tpl, err := Parse(src)
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return tpl
}

// TestFeatures renders the templates of testdata/features.json and
// compares with Python Jinja2's output (written by features.py).
func TestFeatures(t *testing.T) {
	data, err := os.ReadFile("testdata/features.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vars  map[string]json.RawMessage `json:"vars"`
		Cases []struct {
			Template string `json:"template"`
			Want     string `json:"want"`
			Error    bool   `json:"error"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	extra := map[string]any{}
	for k, v := range f.Vars {
		extra[k] = v
	}
	for _, c := range f.Cases {
		tpl, err := Parse(c.Template)
		if err == nil {
			var got string
			got, err = tpl.Render([]Message{{Role: "user", Content: "hi"}}, Options{Extra: extra})
			if err == nil && (c.Error || got != c.Want) {
				t.Errorf("%q:\n\tgot  %q\n\twant %q (error %v)", c.Template, got, c.Want, c.Error)
			}
		}
		if err != nil && !c.Error {
			t.Errorf("%q: %v\n\twant %q", c.Template, err, c.Want)
		}
		if err != nil && strings.Contains(err.Error(), "panic") {
			t.Errorf("%q: %v", c.Template, err)
		}
	}
}

// TestStories260K checks the template of the built-in model: a user turn
// is <s> and its trimmed text, an assistant turn a space, its trimmed
// text and </s>; other roles and the generation prompt add nothing.
func TestStories260K(t *testing.T) {
	data, err := os.ReadFile("../model/builtin/stories260K/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	src, err := FromTokenizerConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	tpl := mustParse(t, src)
	opts := Options{BOSToken: "<s>", EOSToken: "</s>", AddGenerationPrompt: true}
	for _, c := range []struct {
		msgs []Message
		want string
	}{
		{nil, ""},
		{[]Message{{Role: "user", Content: "Once upon a time"}}, "<s>Once upon a time"},
		{[]Message{{Role: "user", Content: "  padded \n"}}, "<s>padded"},
		{[]Message{{Role: "system", Content: "ignored"}, {Role: "user", Content: "Hi"}}, "<s>Hi"},
		{[]Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: " Hello there. "}, {Role: "user", Content: "More"}}, "<s>Hi Hello there.</s><s>More"},
		{[]Message{{Role: "user", Content: ""}, {Role: "assistant", Content: ""}}, "<s> </s>"},
		{[]Message{{Role: "user", Content: "{{ bos_token }} {% if %}"}}, "<s>{{ bos_token }} {% if %}"},
	} {
		got, err := tpl.Render(c.msgs, opts)
		if err != nil || got != c.want {
			t.Errorf("Render(%v) = %q, %v; want %q", c.msgs, got, err, c.want)
		}
	}
}

// llama2Template is the Llama 2 chat template's check of role order, which
// raises for a conversation that does not alternate user/assistant.
const llama2Template = `{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}`

func TestRaiseException(t *testing.T) {
	tpl := mustParse(t, llama2Template)
	opts := Options{BOSToken: "<s>", EOSToken: "</s>"}
	got, err := tpl.Render([]Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Hello"}}, opts)
	want := "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s>"
	if err != nil || got != want {
		t.Fatalf("Render = %q, %v; want %q", got, err, want)
	}
	_, err = tpl.Render([]Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}, opts)
	var re *RaiseError
	if !errors.As(err, &re) || err.Error() != "Conversation roles must alternate user/assistant/user/assistant/..." {
		t.Fatalf("Render(user, user) error = %v (%T), want the template's RaiseError", err, err)
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, c := range []struct{ src, msg string }{
		{"{% for m in messages %}{{ m }}", "'for' at line 1 is not closed"},
		{"{% if x %}a{% endfor %}", "unexpected 'endfor'"},
		{"{% endif %}", "unexpected 'endif'"},
		{"{{ x | nosuchfilter }}", "no filter named 'nosuchfilter'"},
		{"{{ x is nosuchtest }}", "no test named 'nosuchtest'"},
		{"{{ 'abc }}", "unterminated string"},
		{"{{ (1 + 2 }}", "unexpected '}'"},
		{"{{ 1 + }}", "unexpected '}}'"},
		{"line 1\n{% include 'x.jinja' %}", "'include' tag is not supported"},
		{"{% frobnicate %}", "unknown tag 'frobnicate'"},
		{"{# never closed", "missing end of comment"},
		{"{{ x }", "unexpected '}'"},
		{"{{ x ", "expected '}}'"},
		{"{% set x = 1 ", "expected '%}'"},
		{"{{ x(*args) }}", "not supported"},
		{"{{ " + strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000) + " }}", "nested too deeply"},
		{"{{ 99999999999999999999 }}", "out of range"},
	} {
		_, err := Parse(c.src)
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Parse(%.40q) = %v; want a SyntaxError with %q", c.src, err, c.msg)
		}
	}
	_, err := Parse("a\nb\n{% if %}")
	var se *SyntaxError
	if !errors.As(err, &se) || se.Line != 3 {
		t.Errorf("Parse error %v; want line 3", err)
	}
}

func TestRenderErrors(t *testing.T) {
	for _, c := range []struct{ src, msg string }{
		{"{{ messages[0].content + 1 }}", `line 1: can only concatenate str (not "int") to str`},
		{"\n{{ nope.attr }}", "line 2: 'nope' is undefined"},
		{"{{ messages.append(1) }}", "unsafe"},
		{"{{ 1 // 0 }}", "division or modulo by zero"},
		{"{% for x in none %}{% endfor %}", "'NoneType' object is not iterable"},
		{"{{ none | length }}", "has no len()"},
	} {
		_, err := mustParse(t, c.src).Render([]Message{{Role: "user", Content: "hi"}}, Options{})
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Render(%q) = %v; want an error with %q", c.src, err, c.msg)
		}
	}
}

func TestFromTokenizerConfig(t *testing.T) {
	for _, c := range []struct {
		json, want, err string
	}{
		{`{"chat_template": "{{ x }}"}`, "{{ x }}", ""},
		{`{"bos_token": "<s>"}`, "", ""},
		{`{"chat_template": null}`, "", ""},
		{`{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}`, "D", ""},
		{`{"chat_template": [{"name": "rag", "template": "R"}]}`, "", `no chat template named "default"`},
		{`{"chat_template": 7}`, "", "neither a string nor a list"},
		{`{"chat_template": "x"`, "", "tokenizer_config.json"},
	} {
		got, err := FromTokenizerConfig([]byte(c.json))
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("FromTokenizerConfig(%s) = %q, %v; want %q, %q", c.json, got, err, c.want, c.err)
		}
	}
}

// TestStrftimeNow renders the date header of the Llama 3.2 template from an
// injected clock.
func TestStrftimeNow(t *testing.T) {
	src := `{%- if not date_string is defined %}{%- if strftime_now is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- else %}{%- set date_string = "26 Jul 2024" %}{%- endif %}{%- endif %}Today Date: {{ date_string }}|{{ strftime_now("%Y-%m-%d %H:%M:%S %A %B %-d %j %I%p %y %%") }}`
	tpl := mustParse(t, src)
	fake := clock.NewFake(time.Date(2025, time.March, 7, 15, 4, 5, 0, time.UTC))
	got, err := tpl.Render(nil, Options{Clock: fake})
	want := "Today Date: 07 Mar 2025|2025-03-07 15:04:05 Friday March 7 066 03PM 25 %"
	if err != nil || got != want {
		t.Errorf("Render = %q, %v; want %q", got, err, want)
	}
	got, err = tpl.Render(nil, Options{Clock: fake, Extra: map[string]any{"date_string": "1 Jan 2000"}})
	if err != nil || !strings.HasPrefix(got, "Today Date: 1 Jan 2000|") {
		t.Errorf("Render with date_string = %q, %v", got, err)
	}
}

func TestExtra(t *testing.T) {
	tpl := mustParse(t, `{{ tools | tojson }}|{{ m | tojson }}|{{ s | tojson }}|{{ documents is none }}|{{ enable_thinking }}|{{ n }}|{{ l }}`)
	type fn struct {
		Name string `json:"name"`
		Desc string `json:"description,omitempty"`
	}
	got, err := tpl.Render(nil, Options{Extra: map[string]any{
		"tools":           json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "parameters": {"zeta": 1, "alpha": [1.5, true, null]}}}]`),
		"m":               map[string]any{"b": 1, "a": "é"},
		"s":               fn{Name: "f"},
		"enable_thinking": false,
		"n":               uint8(7),
		"l":               []string{"x", "y"},
	}})
	want := `[{"type": "function", "function": {"name": "get_weather", "parameters": {"zeta": 1, "alpha": [1.5, true, null]}}}]|{"a": "é", "b": 1}|{"name": "f"}|True|False|7|['x', 'y']`
	if err != nil || got != want {
		t.Errorf("Render =\n\t%q, %v\nwant\n\t%q", got, err, want)
	}
	for _, bad := range []map[string]any{
		{"messages": nil},
		{"bos_token": "x"},
		{"f": func() {}},
		{"j": json.RawMessage(`{"a": `)},
	} {
		if _, err := tpl.Render(nil, Options{Extra: bad}); err == nil {
			t.Errorf("Render with Extra %v: no error", bad)
		}
	}
}

// TestHostileTemplates checks that templates that loop, recurse or grow
// without bound stop with a LimitError, quickly.
func TestHostileTemplates(t *testing.T) {
	for _, src := range []string{
		"{% for i in range(1000000000) %}x{% endfor %}",
		"{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
		"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
		"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
		"{{ 'x' * 1000000000 }}",
		"{{ [1, 2] * 1000000000 }}",
		"{% set ns = namespace(l=[0]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
		"{{ ('x' * 600000) | replace('x', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}",
		"{% for i in range(200000) %}{{ 'more output ' }}{% endfor %}",
	} {
		start := time.Now()
		_, err := mustParse(t, src).Render(nil, Options{MaxSteps: 200_000, MaxBytes: 1 << 20})
		var le *LimitError
		if !errors.As(err, &le) {
			t.Errorf("Render(%q) = %v; want a LimitError", src, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Render(%q) took %v", src, d)
		}
	}
}

// TestConcurrentRender renders one Template from several goroutines (run
// with -race).
func TestConcurrentRender(t *testing.T) {
	tpl := mustParse(t, `{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.role }}:{{ m.content }};{% endfor %}{{ ns.n }}`)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				got, err := tpl.Render([]Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}, Options{})
				if err != nil || got != "user:a;assistant:b;2" {
					t.Errorf("Render = %q, %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// FuzzRender checks that no template source makes Parse or Render panic
// (a recovered panic would show as an error naming a panic).
func FuzzRender(f *testing.F) {
	f.Add(llama2Template)
	f.Add("{%- for m in messages %}{{- '<|' + m.role + '|>' + m.content | trim }}{% if loop.last and add_generation_prompt %}x{% endif %}{%- endfor %}")
	f.Add("{% set ns = namespace(a=[], b={}) %}{{ ns.a[1:-1:2] }}{{ (ns.b | tojson(indent=2)) ~ '%s' % (1,) }}")
	f.Add("{% macro m(a, b=2) %}{{ a.split(',')[::-1] | join }}{% endmacro %}{{ m('x,y') }}{{ 'a'.center(9, '*') }}")
	f.Add("{{ '{:}{}'.format(1, 2) }}{{ '%-5.2f|%(k)s' % {'k': 1} }}{{ range(3, -3, -2) | batch(2) | list }}")
	f.Add("  {%+ if x is not none and (y if z else w) %}\n{% raw %}{{{% endraw %}{#-c-#}{% endif %}")
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(src)
		if err != nil {
			if strings.Contains(err.Error(), "panic") {
				t.Fatalf("Parse(%q): %v", src, err)
			}
			return
		}
		_, err = tpl.Render([]Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}}, Options{MaxSteps: 20_000, MaxBytes: 1 << 16,
			Extra: map[string]any{"x": 1, "y": "y", "z": []any{1.5, nil}, "w": map[string]any{"k": "v"}}})
		if err != nil && strings.Contains(err.Error(), "panic") {
			t.Fatalf("Render(%q): %v", src, err)
		}
	})
}
