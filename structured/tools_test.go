package structured

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// testTools share the call object's shape (every call is an object with
// a name and parameters), so only the name tells which schema follows.
var testTools = []Tool{
	{Name: "get_weather", Parameters: []byte(`{"type": "object", "properties": {"city": {"type": "string", "maxLength": 4}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}`)},
	{Name: "get_time", Parameters: []byte(`{"type": "object", "properties": {"zone": {"type": "integer", "minimum": 0, "maximum": 3}}, "required": ["zone"]}`)},
	{Name: "ping"}, // no parameters: the empty object
}

func TestToolCallsAccepts(t *testing.T) {
	f, err := ToolCalls(testTools, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{
		`[{"name":"get_weather","parameters":{"city":"Oslo"}}]`,
		`[{"name": "get_time", "parameters": {"zone": 2}}, {"name": "get_weather", "parameters": {"city": "a", "unit": "f"}}]`,
		`[{"name":"ping","parameters":{}}]`, `[{"name":"ping","parameters":{ }}]`,
	} {
		if n, ok := runFormat(f, text); n != len(text) || !ok {
			t.Errorf("%q: took %d of %d bytes, complete %v", text, n, len(text), ok)
		}
	}
	for text, at := range map[string]int{
		`[]`:                  1,  // at least one call
		`[{"parameters":{}`:   3,  // the name comes first
		`[{"name":"get_wind"`: 15, // not a tool
		`[{"name":"get_time","parameters":{"city":"x"}`:        35, // get_weather's parameter under get_time
		`[{"name":"get_weather","parameters":{"zone":1}`:       38,
		`[{"name":"get_time","parameters":{"zone":4}`:          41, // get_time's own schema
		`[{"name":"get_weather","parameters":{"city":"Osloo"`:  49,
		`[{"name":"get_weather","parameters":{"city":"a"},"x"`: 48, // nothing after parameters
		`[{"name":"ping","parameters":[]`:                      29, // an object
		`[{"name":"ping","parameters":{"a"`:                    30, // with no keys
	} {
		if n, ok := runFormat(f, text); n != at || ok {
			t.Errorf("%q: refused at byte %d (complete %v), want %d (%q)", text, n, ok, at, text[:min(at, len(text))])
		}
	}
	one, err := ToolCalls(testTools, 1)
	if err != nil {
		t.Fatal(err)
	}
	text := `[{"name":"ping","parameters":{}},`
	if n, _ := runFormat(one, text); n != len(text)-1 {
		t.Errorf("maxCalls 1: a second call was let in (%d of %q)", n, text)
	}
}

func TestToolCallsErrors(t *testing.T) {
	for _, tools := range [][]Tool{
		nil,
		{{Name: ""}},
		{{Name: "a"}, {Name: "a"}},
		{{Name: "a", Parameters: []byte(`{"type": "string"}`)}},
		{{Name: "a", Parameters: []byte(`{"type": "object", "properties": {"s": {"type": "string", "multipleOf": 2}}}`)}},
	} {
		if _, err := ToolCalls(tools, 0); err == nil {
			t.Errorf("%v: no error", tools)
		}
	}
	if _, err := ToolArguments(Tool{Name: "a", Parameters: []byte(`[`)}); err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("bad schema: %v, want an error naming the function", err)
	}
}

// TestToolCallsWalks generates calls token by token through the mask and
// checks each against its own tool's schema with the tests' validator.
func TestToolCallsWalks(t *testing.T) {
	pieces := slices.Clone(testPieces)
	for c := 'a'; c <= 'z'; c++ {
		pieces = append(pieces, string(c), `"`+string(c))
	}
	pieces = append(pieces, "_", `"name":"`, `get_`, `weather`, `time`, `ping"`, `"parameters":{`, `"city":"`, `"zone":`, `"unit":`, `"c"`)
	v := NewVocab(pieces, func(id int) bool { return id < 2 }, []int{1})
	f, err := ToolCalls(testTools, 3)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	named := map[string]int{}
	for walk := range 300 {
		text := randomWalk(t, v, pieces, f, r, 60)
		var calls []struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal([]byte(text), &calls); err != nil || len(calls) == 0 || len(calls) > 3 {
			t.Fatalf("walk %d generated %q: %v, %d calls", walk, text, err, len(calls))
		}
		for _, c := range calls {
			i := slices.IndexFunc(testTools, func(tool Tool) bool { return tool.Name == c.Name })
			if i < 0 {
				t.Fatalf("walk %d generated %q: unknown tool %q", walk, text, c.Name)
			}
			schema := string(testTools[i].Parameters)
			if schema == "" {
				schema = `{"type": "object", "additionalProperties": false}`
			}
			if err := validate(t, schema, string(c.Parameters)); err != "" {
				t.Fatalf("walk %d generated %q: %s's parameters %s: %s", walk, text, c.Name, c.Parameters, err)
			}
			named[c.Name]++
		}
	}
	if len(named) != len(testTools) {
		t.Errorf("the walks called %v, want every tool", named)
	}
}

func TestTaggedToolCalls(t *testing.T) {
	f, err := TaggedToolCalls("<tool_call>", "</tool_call>", testTools)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Free() {
		t.Error("a tagged format is not free")
	}
	for _, text := range []string{
		"", "No calls, just text < and <tool and </tool_call>.",
		"Let me check.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": 2}}\n</tool_call>",
		"<tool_call>{\"name\":\"ping\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}</tool_call> and after",
		"<<tool_call>{\"name\":\"ping\",\"arguments\":{}}</tool_call>", // a false start, then the tag
	} {
		if n, ok := runFormat(f, text); n != len(text) || !ok {
			t.Errorf("%q: took %d of %d bytes, may end %v", text, n, len(text), ok)
		}
	}
	for text, at := range map[string]int{
		`<tool_call>{"name": "nope"`:                          21, // not a tool
		`<tool_call>{"name":"get_time","arguments":{"zone":"`: 50, // an integer
		`<tool_call>{"name":"ping","arguments":{}} x`:         42, // the closing tag comes next
		`<tool_call>{"name":"ping","arguments":{}}</tool_x`:   48,
		`<tool_call>{"name":"ping","parameters"`:              27, // "arguments" in this syntax
		`<tool_call>hi`:                                       11, // an object
	} {
		if n, ok := runFormat(f, text); n != at || ok {
			t.Errorf("%q: refused at byte %d (may end %v), want %d (%q)", text, n, ok, at, text[:min(at, len(text))])
		}
	}
	if n, ok := runFormat(f, `text <tool_call>{"name":"ping"`); n != 30 || ok {
		t.Errorf("inside a call: took %d, may end %v; want all, and not the end", n, ok)
	}
}

// TestTaggedToolCallsWalks generates free text with calls through the
// mask, checked at every step against each token tried on its own: the
// calls must be well-formed calls of the tools and the text may not end
// inside one.
func TestTaggedToolCallsWalks(t *testing.T) {
	pieces := slices.Clone(testPieces)
	for c := 'a'; c <= 'z'; c++ {
		pieces = append(pieces, string(c), `"`+string(c))
	}
	pieces = append(pieces, "_", ">", "<", "<tool", "_call>", "<tool_call>", "<tool_call>\n{", "</tool_call>", "</", "tool_call>", " <", "x<",
		`"name":"`, `get_`, `weather`, `time`, `ping"`, `"arguments":{`, `"city":"`, `"zone":`, `"unit":`, `"c"`)
	v := NewVocab(pieces, func(id int) bool { return id < 2 }, []int{1})
	free, err := TaggedToolCalls("<tool_call>", "</tool_call>", testTools)
	if err != nil {
		t.Fatal(err)
	}
	only, err := TaggedToolCallsOnly("<tool_call>", "</tool_call>", testTools, 3)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	calls := 0
	for walk := range 300 {
		f := free
		if walk%3 == 2 {
			f = only
		}
		text := randomWalk(t, v, pieces, f, r, 60)
		made := 0
		outside := ""
		rest := text
		for {
			i := strings.Index(rest, "<tool_call>")
			if i < 0 {
				break
			}
			rest = rest[i+len("<tool_call>"):]
			j := strings.Index(rest, "</tool_call>")
			if j < 0 {
				t.Fatalf("walk %d ended inside a call: %q", walk, text)
			}
			var c struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			}
			if err := json.Unmarshal([]byte(rest[:j]), &c); err != nil {
				t.Fatalf("walk %d: call %q: %v", walk, rest[:j], err)
			}
			k := slices.IndexFunc(testTools, func(tool Tool) bool { return tool.Name == c.Name })
			schema := `{"type": "object", "additionalProperties": false}`
			if k >= 0 && testTools[k].Parameters != nil {
				schema = string(testTools[k].Parameters)
			}
			if k < 0 || validate(t, schema, string(c.Arguments)) != "" {
				t.Fatalf("walk %d: call %q", walk, rest[:j])
			}
			calls++
			made++
			rest = rest[j+len("</tool_call>"):]
			if k := strings.Index(rest, "<tool_call>"); k >= 0 {
				outside += rest[:k]
			} else {
				outside += rest
			}
		}
		if f == only && (made == 0 || made > 3 || strings.TrimSpace(outside) != "" || !strings.HasPrefix(strings.TrimSpace(text), "<tool_call>")) {
			t.Fatalf("walk %d, calls alone: %d calls in %q", walk, made, text)
		}
	}
	if calls == 0 {
		t.Error("no walk made a call")
	}
	t.Logf("%d calls in 300 walks", calls)
}

func TestTaggedToolCallsOnly(t *testing.T) {
	f, err := TaggedToolCallsOnly("<tool_call>", "</tool_call>", testTools, 2)
	if err != nil {
		t.Fatal(err)
	}
	if f.Free() {
		t.Error("a format of calls alone is free")
	}
	call := `<tool_call>{"name":"ping","arguments":{}}</tool_call>`
	for _, text := range []string{call, "\n" + call + "\n" + call, call + " \n"} {
		if n, ok := runFormat(f, text); n != len(text) || !ok {
			t.Errorf("%q: took %d of %d bytes, may end %v", text, n, len(text), ok)
		}
	}
	for text, at := range map[string]int{
		"Sure":                   0,                           // no text
		"   ":                    2,                           // whitespace runs of two bytes
		"<tool_x":                6,                           // the tag itself, byte by byte
		call + call + "<":        2 * len(call),               // at most two calls
		call + "\nok":            len(call) + 1,               // nothing but calls
		`<tool_call>{"name":"x"`: len(`<tool_call>{"name":"`), // a tool's name
	} {
		if n, ok := runFormat(f, text); n != at || ok {
			t.Errorf("%q: refused at byte %d (may end %v), want %d", text, n, ok, at)
		}
	}
	for _, text := range []string{"", "\n", "<tool_c"} { // no call yet: the text may not end
		if n, ok := runFormat(f, text); n != len(text) || ok {
			t.Errorf("%q: took %d, may end %v; want all, and not the end", text, n, ok)
		}
	}
}
