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
