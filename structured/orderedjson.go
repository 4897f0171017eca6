package structured

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/gearboxlm/gearbox/internal/orderedjson"
)

// object is a JSON object that keeps its keys' order: a schema's
// properties are generated in the order the schema writes them, which a
// Go map forgets.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// Set adds a member, refusing a duplicate key (a schema's would be
// ambiguous).
func (o *object) Set(k string, v any) error {
	if _, dup := o.vals[k]; dup {
		return fmt.Errorf("duplicate key %q", k)
	}
	o.keys = append(o.keys, k)
	o.vals[k] = v
	return nil
}

// maxSchemaNesting bounds how deep a schema's JSON nests. A schema sent
// as a string (guided_json, structured_outputs.json) is not checked by
// the request's own decoding: 4 MiB of "[" once overflowed the goroutine
// stack, a fatal error.
const maxSchemaNesting = 1000

// parseJSON decodes one JSON text into nil, bool, json.Number, string,
// []any and *object values.
func parseJSON(raw []byte) (any, error) {
	return orderedjson.Decoder{MaxDepth: maxSchemaNesting, NewObject: func() orderedjson.Object {
		return &object{vals: map[string]any{}}
	}}.Decode(raw)
}

// compactJSON writes v (as parseJSON returns it) as compact JSON text,
// strings without HTML escaping: the exact bytes a generation must
// produce to give v.
func compactJSON(b *bytes.Buffer, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		fmt.Fprint(b, v)
	case json.Number:
		b.WriteString(string(v))
	case string:
		writeString(b, v)
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			compactJSON(b, e)
		}
		b.WriteByte(']')
	case *object:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			compactJSON(b, v.vals[k])
		}
		b.WriteByte('}')
	}
}

// writeString writes s as a JSON string as encoding/json does, without
// its HTML escapes.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}
