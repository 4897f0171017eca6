package structured

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// testSchemas reach every rule of the compiled subset: declared
// properties in order with optional ones to skip, nested objects and
// arrays with bounds, maps, enums and consts of every kind, integer and
// number, bounded strings, type lists, anyOf, and a recursive $ref.
var testSchemas = map[string]string{
	"person": `{"type": "object", "properties": {
		"name": {"type": "string", "minLength": 1, "maxLength": 6},
		"age": {"type": "integer"},
		"nick": {"type": ["string", "null"]},
		"tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1, "maxItems": 3},
		"role": {"enum": ["admin", "user", 12, null, true]}
	}, "required": ["name", "tags", "role"], "additionalProperties": false}`,
	"nested": `{"type": "object", "properties": {
		"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]},
		"flags": {"type": "object", "additionalProperties": {"type": "boolean"}},
		"any": {},
		"pair": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
		"k": {"const": "fixed"}
	}, "required": ["point", "k"]}`,
	"union": `{"type": "object", "properties": {
		"v": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}, "maxItems": 2}, {"type": "null"}]},
		"w": {"oneOf": [{"$ref": "#/$defs/leaf"}, {"type": "boolean"}]}
	}, "required": ["v", "w"], "$defs": {"leaf": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}`,
	"tree": `{"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
		"val": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}
	}, "required": ["val"]}}}`,
	"empty": `{"type": "object", "additionalProperties": false}`,
	"bounded": `{"type": "object", "properties": {
		"stars": {"type": "integer", "minimum": 1, "maximum": 5},
		"temp": {"type": "integer", "exclusiveMinimum": -12, "maximum": 130},
		"list": {"type": "array", "items": {"type": "integer", "minimum": 0, "exclusiveMaximum": 1000}}
	}, "required": ["stars", "temp"]}`,
	"patterns": `{"type": "object", "properties": {
		"zip": {"type": "string", "pattern": "^[0-9]{3}-[a-z]{2}$"},
		"word": {"type": ["string", "null"], "pattern": "(é|ab)+\\.?"},
		"quote": {"type": "string", "pattern": "\"x\\\\?\""},
		"list": {"type": "array", "items": {"type": "string", "pattern": "[xyz]{1,3}"}, "maxItems": 2},
		"any": {"type": "string", "pattern": "[^a]*"}
	}, "required": ["zip", "word", "quote"]}`,
	"self": `{"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}, "child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["name"]}`,
}

func compileTest(t *testing.T, name string) *Format {
	t.Helper()
	f, err := JSONSchema([]byte(testSchemas[name]))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

// runFormat feeds text to a fresh recognizer of f and returns how many
// bytes it took and whether the text is a whole value.
func runFormat(f *Format, text string) (int, bool) {
	s := f.state()
	for i := 0; i < len(text); i++ {
		if !s.step(text[i]) {
			return i, false
		}
	}
	return len(text), s.complete()
}

func TestSchemaAccepts(t *testing.T) {
	for name, texts := range map[string][]string{
		"person": {
			`{"name":"Al","tags":["a"],"role":"admin"}`,
			`{"name": "Bo", "age": -3, "nick": null, "tags": ["x", "yz", ""], "role": 12}`,
			`{"name":"Cy","nick":"c","tags":["é"],"role":null}`, `{"name":"Dee","tags":["q"],"role":true}`,
			`{"name":"\ud83d\ude00abcde","tags":["\ud83d\ude00"],"role":true}`, // a surrogate pair is one character
		},
		"nested": {
			`{"point":{"x":1.5,"y":-2e3},"k":"fixed"}`,
			`{"point":{"x":0,"y":0},"flags":{"a":true,"b":false},"any":[1,{"z":null}],"k":"fixed"}`,
			`{"point":{"x":1,"y":2},"flags":{},"k":"fixed"}`, `{"point":{"x":1,"y":2},"pair":[3, 4],"k":"fixed"}`,
		},
		"union":   {`{"v":"s","w":true}`, `{"v":[1,2],"w":{"n":3}}`, `{"v":null,"w":false}`, `{"v":[],"w":{"n":-1}}`},
		"tree":    {`{"val":1}`, `{"val":1,"kids":[{"val":2},{"val":3,"kids":[{"val":4}]}]}`},
		"empty":   {`{}`, ` { } `},
		"bounded": {`{"stars":1,"temp":-11}`, `{"stars":5,"temp":130,"list":[0,7,999,10]}`, `{"stars": 3 , "temp": 0}`},
		"patterns": {
			`{"zip":"123-ab","word":"ab","quote":"\"x\""}`,
			`{"zip":"000-zz","word":"\u00e9ab.","quote":"\"x\\\"","list":["xy","z"],"any":" \u00e9😀\t\ud83d\ude00"}`,
			`{"zip":"999-qq","word":null,"quote":"\u0022x\u005c\u0022"}`,
		},
		"self": {`{"name":"a"}`, `{"name":"a","child":{"name":"b","child":null}}`, `{"name":"a","child":{"name":"b","child":{"name":"c"}}}`},
	} {
		f := compileTest(t, name)
		for _, text := range texts {
			if n, ok := runFormat(f, text); n != len(text) || !ok {
				t.Errorf("%s: %q: took %d of %d bytes, complete %v", name, text, n, len(text), ok)
			}
			if err := validate(t, testSchemas[name], text); err != "" {
				t.Fatalf("%s: test case %q does not validate: %s", name, text, err)
			}
		}
	}
}

func TestSchemaRefuses(t *testing.T) {
	for name, cases := range map[string]map[string]int{
		"person": {
			`{"age":1`:                                           2,  // name is required before age
			`{"name":"","tags":["a"]`:                            9,  // minLength 1
			`{"name":"abcdefg"`:                                  15, // maxLength 6
			`{"name":"\ud83d\ude00abcdef`:                        26, // 7 characters
			`{"name":"a","age":1.5`:                              19, // integer
			`{"name":"a","tags":[]`:                              20, // minItems 1
			`{"name":"a","tags":["a","b","c",`:                   31, // maxItems 3
			`{"name":"a","tags":["abcd"`:                         24, // items' maxLength 3
			`{"name":"a","tags":["a"],"role":"root"`:             33, // not in the enum
			`{"name":"a","tags":["a"],"role":123`:                34, // 12 is, 123 is not
			`{"name":"a","tags":["a"],"role":false`:              32,
			`{"name":"a","tags":["a"],"role":"user","x"`:         38, // no undeclared keys
			`{"name":"a","tags":["a"],"role":"user"}`[:28] + `}`: 28, // role is required
			`{"tags":["a"],"name":"a"`:                           2,  // declared order
		},
		"nested": {
			`{"point":{"x":1,"y":2},"pair":[1]`:           32, // minItems 2
			`{"point":{"x":1}`:                            15, // y is required
			`{"point":{"x":1,"y":2},"flags":{"a":1`:       36,
			`{"point":{"x":1,"y":2},"k":"fixe"}`:          32,
			`{"point":{"x":1,"y":2},"k":"fixed","more":1`: 34,
		},
		"union": {
			`{"v":1`:            5,
			`{"v":[1,2,3`:       9, // maxItems 2
			`{"v":[1.5`:         7,
			`{"v":"a","w":{"m"`: 15,
			`{"v":"a","w":null`: 13,
		},
		"tree": {`{"val":1,"kids":[{"val":2},{"val":3},`: 36, `{"kids":[]`: 2},
		"patterns": {
			`{"zip":"12a`:                                                10, // a digit
			`{"zip":"123-a"`:                                             13, // not yet
			`{"zip":"123-ab","word":"a"`:                                 25, // "a" needs its "b"
			`{"zip":"123-ab","word":"\ud8`:                               26, // no character the pattern takes begins so
			`{"zip":"123-ab","word":"\u00e8`:                             29, // è, not é
			`{"zip":"123-ab","word":"\n`:                                 25, // a newline is no character of the pattern
			"{\"zip\":\"123-ab\",\"word\":\"\xc3\xa8":                    25, // è in UTF-8: refused at its last byte
			"{\"zip\":\"123-ab\",\"word\":\"\xe6":                        24, // no three-byte character can come
			`{"zip":"123-ab","word":"ab","quote":"\"x\"","any":"\ud800"`: 57, // a high half alone is no character
			`{"zip":"123-ab","word":"ab","quote":"\"x\"","any":"\udc00`:  54, // nor a low half
		},
		"empty": {`{"a"`: 1},
		"bounded": {`{"stars":0`: 9, `{"stars":6`: 9, `{"stars":12`: 10, `{"stars":1,"temp":-12`: 20, `{"stars":1,"temp":131`: 20,
			`{"stars":1,"temp":01`: 19, `{"stars":1,"temp":1.5`: 19, `{"stars":1,"temp":1,"list":[1000`: 31, `{"stars":1.0`: 10},
	} {
		f := compileTest(t, name)
		for text, at := range cases {
			if n, ok := runFormat(f, text); n != at || ok {
				t.Errorf("%s: %q: refused at byte %d (complete %v), want %d (%q)", name, text, n, ok, at, text[:min(at, len(text))])
			}
		}
	}
}

func TestSchemaErrors(t *testing.T) {
	for schema, want := range map[string]string{
		`[1]`:                          "must be an object or a boolean",
		`{"type": "array"}`:            "the root must be an object",
		`{}`:                           "the root must be an object",
		`{"type": ["object", "null"]}`: "the root must be an object",
		`{"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}}`:                                   "bounds must both be set",
		`{"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 4096}}}`:                  "span at most 4096",
		`{"type": "object", "properties": {"a": {"type": "number", "minimum": 0, "maximum": 1}}}`:                      "supported on integers alone",
		`{"type": "object", "properties": {"a": {"type": "integer", "minimum": 0.5, "maximum": 3}}}`:                   "minimum must be an integer",
		`{"type": "object", "properties": {"a": {"type": "integer", "minimum": 3, "maximum": 2}}}`:                     "bounds must both be set",
		`{"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2}}}`:                                `keyword "multipleOf" is not supported`,
		`{"type": "object", "properties": {"a": {"type": "string", "pattern": "x", "maxLength": 3}}}`:                  "pattern together with minLength",
		`{"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}`:                                  "missing closing )",
		`{"type": "object", "properties": {"a": {"type": "integer", "pattern": "1"}}}`:                                 "keywords for a type",
		`{"type": "object", "properties": {"a": {"type": "decimal"}}}`:                                                 `unknown type "decimal"`,
		`{"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]}}}`: "alternatives must differ in type",
		`{"type": "object", "properties": {"a": {"anyOf": [{"const": 1}, {"type": "string"}]}}}`:                       "enum or const inside anyOf",
		`{"type": "object", "properties": {"a": {}}, "required": ["b"]}`:                                               `required property "b" is not declared`,
		`{"type": "object", "properties": {"a": {}}, "additionalProperties": true}`:                                    "properties together with additionalProperties",
		`{"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}`:                                         "does not resolve",
		`{"type": "object", "properties": {"a": {"$ref": "http://example.com/s"}}}`:                                    "only local references",
		`{"type": "object", "properties": {"a": {"enum": []}}}`:                                                        "enum must be a non-empty array",
		`{"type": "object", "properties": {"a": {"enum": [1, 2], "const": 3}}}`:                                        "const is not among enum's values",
		`{"type": "object", "properties": {"a": {"type": "array", "minItems": 3, "maxItems": 2}}}`:                     "minItems 3 is above maxItems 2",
		`{"type": "object", "properties": {"a": {"type": "string", "maxLength": -1}}}`:                                 "maxLength must be a non-negative integer",
		`{"type": "object", "properties": {"a": {"type": "integer", "items": {}}}}`:                                    "keywords for a type",
		`{"type": "object", "properties": {"a": false}}`:                                                               "false allows no value",
		`{"type": "object"`:        "schema:",
		strings.Repeat("[", 4<<20): "nested more than 1000 deep", // once a stack overflow
		`{"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"anyOf": [{"$ref": "#/$defs/x"}]}}}`: "$ref chain too long",
	} {
		if _, err := JSONSchema([]byte(schema)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", schema, err, want)
		}
	}
	// A schema with more properties than the key matcher's set holds.
	var props []string
	for i := range maxProperties + 1 {
		props = append(props, `"p`+strings.Repeat("x", i)+`": {}`)
	}
	if _, err := JSONSchema([]byte(`{"type": "object", "properties": {` + strings.Join(props, ",") + `}}`)); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Errorf("65 properties: %v", err)
	}
}

// TestSchemaWalks generates from every test schema with random choices
// among the allowed tokens of a vocabulary with the whole alphabet (after
// 80 steps preferring tokens that close what is open): at every step the
// mask equals checking each token by hand, and every walk ends in a value
// that an independent validator (below) finds the schema allows.
func TestSchemaWalks(t *testing.T) {
	pieces := slices.Clone(testPieces)
	for c := 'a'; c <= 'z'; c++ {
		pieces = append(pieces, string(c), `"`+string(c))
	}
	pieces = append(pieces, `"name":"`, `"tags":["`, `admin`, `"role":`, `"point":{"x":`, `fixed"`, `"val":`, `"kids":[`)
	v := NewVocab(pieces, func(id int) bool { return id < 2 }, []int{1})
	r := rand.New(rand.NewPCG(5, 6))
	for name := range testSchemas {
		f := compileTest(t, name)
		for walk := range 150 {
			text := randomWalk(t, v, pieces, f, r, 80)
			if err := validate(t, testSchemas[name], text); err != "" {
				t.Fatalf("%s walk %d generated %q: %s", name, walk, text, err)
			}
		}
	}
}

// validate checks text against a schema of the subset the tests use,
// written apart from the compiler: the types, declared properties (in
// order, required ones present, no others unless additionalProperties
// allows them), items and their bounds, string lengths in characters,
// enum and const by JSON text, anyOf and oneOf, and local $refs. It
// returns "" when text is valid.
func validate(t *testing.T, schema, text string) string {
	t.Helper()
	s, err := parseJSON([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid([]byte(text)) {
		return "not JSON"
	}
	v, err := parseJSON([]byte(text))
	if err != nil {
		return err.Error()
	}
	return check(s.(*object), s, v, text)
}

func check(root *object, s any, v any, _ string) string {
	if b, ok := s.(bool); ok {
		if !b {
			return "false schema"
		}
		return ""
	}
	o := s.(*object)
	if ref, ok := o.get("$ref"); ok {
		target := any(root)
		for _, part := range strings.Split(ref.(string), "/")[1:] { // "#", "#/$defs/name"
			target, _ = target.(*object).get(part)
		}
		return check(root, target, v, "")
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := o.get(key); ok {
			for _, a := range alts.([]any) {
				if check(root, a, v, "") == "" {
					return ""
				}
			}
			return "no alternative matches"
		}
	}
	text := func(v any) string {
		var b bytes.Buffer
		compactJSON(&b, v)
		return b.String()
	}
	if e, ok := o.get("enum"); ok && !slices.ContainsFunc(e.([]any), func(x any) bool { return text(x) == text(v) }) {
		return "not in enum: " + text(v)
	}
	if c, ok := o.get("const"); ok && text(c) != text(v) {
		return "not the const"
	}
	if ty, ok := o.get("type"); ok {
		names, _ := ty.([]any)
		if name, ok := ty.(string); ok {
			names = []any{name}
		}
		if !slices.ContainsFunc(names, func(n any) bool { return typeOf(v, n.(string)) }) {
			return "wrong type: " + text(v)
		}
	}
	switch v := v.(type) {
	case *object:
		props, _ := o.get("properties")
		declared, _ := props.(*object)
		extra, hasExtra := o.get("additionalProperties")
		if !hasExtra && declared == nil {
			extra = true
		}
		last := -1
		for _, k := range v.keys {
			if declared != nil {
				if i := slices.Index(declared.keys, k); i >= 0 {
					if i < last {
						return "out of order: " + k
					}
					last = i
					if err := check(root, declared.vals[k], v.vals[k], ""); err != "" {
						return k + ": " + err
					}
					continue
				}
			}
			if extra == nil || extra == false {
				return "undeclared key " + k
			}
			if err := check(root, extra, v.vals[k], ""); err != "" {
				return k + ": " + err
			}
		}
		if req, ok := o.get("required"); ok {
			for _, k := range req.([]any) {
				if _, ok := v.get(k.(string)); !ok {
					return "missing " + k.(string)
				}
			}
		}
	case []any:
		if lo, ok := o.get("minItems"); ok && len(v) < atoi(lo) {
			return "too few items"
		}
		if hi, ok := o.get("maxItems"); ok && len(v) > atoi(hi) {
			return "too many items"
		}
		if items, ok := o.get("items"); ok {
			for _, e := range v {
				if err := check(root, items, e, ""); err != "" {
					return "item: " + err
				}
			}
		}
	case json.Number:
		x, _ := v.Float64()
		for key, ok := range map[string]func(b float64) bool{
			"minimum": func(b float64) bool { return x >= b }, "exclusiveMinimum": func(b float64) bool { return x > b },
			"maximum": func(b float64) bool { return x <= b }, "exclusiveMaximum": func(b float64) bool { return x < b },
		} {
			if b, has := o.get(key); has {
				if f, _ := b.(json.Number).Float64(); !ok(f) {
					return key + " violated: " + string(v)
				}
			}
		}
	case string:
		n := utf8.RuneCountInString(v)
		if lo, ok := o.get("minLength"); ok && n < atoi(lo) {
			return "too short"
		}
		if hi, ok := o.get("maxLength"); ok && n > atoi(hi) {
			return "too long"
		}
		if p, ok := o.get("pattern"); ok && !regexp.MustCompile(`^(?:`+p.(string)+`)$`).MatchString(v) {
			return "does not match " + p.(string)
		}
	}
	return ""
}

func typeOf(v any, name string) bool {
	switch v := v.(type) {
	case *object:
		return name == "object"
	case []any:
		return name == "array"
	case string:
		return name == "string"
	case bool:
		return name == "boolean"
	case nil:
		return name == "null"
	case json.Number:
		return name == "number" || name == "integer" && !strings.ContainsAny(string(v), ".eE")
	}
	return false
}

func atoi(v any) int {
	n, _ := v.(json.Number).Int64()
	return int(n)
}

// TestSchemaMutations compiles thousands of schemas made by changing the
// test schemas at random (values swapped for others of any type, keys and
// bytes changed): every one compiles or is refused with an error, never a
// panic, and what compiles takes its own test cases' prefixes without
// panicking either.
func TestSchemaMutations(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	replacements := []string{`1`, `-1`, `"x"`, `true`, `null`, `[]`, `{}`, `[1, "a"]`, `{"type": "string"}`, `{"$ref": "#"}`, `{"$ref": 3}`, `"#/$defs/leaf"`, `{"anyOf": 1}`, `{"anyOf": [{"$ref": "#/$defs/nope"}]}`}
	var names []string
	for name := range testSchemas {
		names = append(names, name)
	}
	slices.Sort(names)
	for i := range 4000 {
		text := []byte(testSchemas[names[i%len(names)]])
		for range 1 + r.IntN(3) {
			switch p := r.IntN(len(text)); r.IntN(3) {
			case 0: // a value after a colon replaced
				if j := bytes.IndexByte(text[p:], ':'); j >= 0 {
					at := p + j + 1
					end := at
					for end < len(text) && text[end] != ',' && text[end] != '}' {
						end++
					}
					text = slices.Concat(text[:at], []byte(replacements[r.IntN(len(replacements))]), text[end:])
				}
			case 1:
				text[p] = "{}[]\",:01anty$#"[r.IntN(15)]
			default:
				text = slices.Delete(text, p, p+1)
			}
		}
		func() {
			defer func() {
				if e := recover(); e != nil {
					t.Fatalf("%s: panic: %v", text, e)
				}
			}()
			f, err := JSONSchema(text)
			if err != nil {
				return
			}
			s := newState(f.root, f.raw)
			for _, b := range []byte(`{"name":"a","point":{"x":1},"v":[1],"val":2,"kids":[{"val":3}]}`) {
				if !s.step(b) {
					break
				}
			}
		}()
	}
}

// TestChoice: a choice format generates exactly one of its options as
// plain text, one that another extends included (the end token is
// allowed there), with no whitespace around it; empty options and an
// empty list are refused.
func TestChoice(t *testing.T) {
	options := []string{"yes", "yes!", "no", "maybe so", "日本", `"quoted"`}
	f, err := Choice(options)
	if err != nil {
		t.Fatal(err)
	}
	pieces := slices.Clone(testPieces)
	for c := 'a'; c <= 'z'; c++ {
		pieces = append(pieces, string(c))
	}
	pieces = append(pieces, "yes", "ye", "s!", "!", "maybe", " so", "no!")
	v := NewVocab(pieces, func(id int) bool { return id < 2 }, []int{1})
	r := rand.New(rand.NewPCG(11, 12))
	seen := map[string]bool{}
	for range 300 {
		text := randomWalk(t, v, pieces, f, r, 1000)
		if !slices.Contains(options, text) {
			t.Fatalf("generated %q, not an option", text)
		}
		seen[text] = true
	}
	if len(seen) != len(options) {
		t.Errorf("300 walks reached %d of the %d options: %v", len(seen), len(options), seen)
	}
	for text, at := range map[string]int{" yes": 0, "yes ": 3, "yes!!": 4, "nope": 2} {
		if n, _ := runFormat(f, text); n != at {
			t.Errorf("%q: refused at %d, want %d", text, n, at)
		}
	}
	if n, ok := runFormat(f, "yes"); n != 3 || !ok {
		t.Errorf(`"yes": took %d bytes, complete %v; it may end there`, n, ok)
	}
	for _, bad := range [][]string{nil, {"a", ""}} {
		if _, err := Choice(bad); err == nil {
			t.Errorf("Choice(%q) accepted", bad)
		}
	}
}

// TestWithoutWhitespace: the compact format takes the same values with
// no whitespace between tokens, and its walks generate none.
func TestWithoutWhitespace(t *testing.T) {
	f := compileTest(t, "nested").WithoutWhitespace()
	text := `{"point":{"x":1,"y":2},"k":"fixed"}`
	if n, ok := runFormat(f, text); n != len(text) || !ok {
		t.Errorf("%q: took %d, complete %v", text, n, ok)
	}
	for _, text := range []string{` {`, `{ "point"`, `{"point" :`, `{"point":{"x":1 ,`} {
		if n, _ := runFormat(f, text); n != strings.IndexByte(text, ' ') {
			t.Errorf("%q: refused at %d, want at the whitespace", text, n)
		}
	}
	v := testVocab()
	r := rand.New(rand.NewPCG(9, 10))
	for walk := range 100 {
		text := randomWalk(t, v, testPieces, JSONObject().WithoutWhitespace(), r, 60)
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(text)); err != nil || compact.String() != text {
			t.Fatalf("walk %d: %q is not compact JSON (%v)", walk, text, err)
		}
	}
}
