package structured

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// parseJSON decodes one JSON text into nil, bool, json.Number, string,
// []any and *object values.
func parseJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("text after the JSON value")
	}
	return v, nil
}

// maxSchemaNesting bounds how deep a schema's JSON nests. A schema sent
// as a string (guided_json, structured_outputs.json) is not checked by
// the request's own decoding, and each level is a frame of parseValue's
// recursion: 4 MiB of "[" overflowed the goroutine stack, a fatal error.
const maxSchemaNesting = 1000

func parseValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxSchemaNesting {
		return nil, fmt.Errorf("nested more than %d deep", maxSchemaNesting)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; dup {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				o.keys = append(o.keys, k)
				o.vals[k] = v
			}
			_, err := dec.Token() // '}'
			return o, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token() // ']'
			return list, err
		}
	}
	return tok, nil
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
