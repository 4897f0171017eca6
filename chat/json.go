package chat

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/gearboxlm/gearbox/internal/orderedjson"
	"github.com/gearboxlm/gearbox/internal/pyjson"
)

// jsonOptions are the arguments of transformers' tojson filter, which is
// json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys).
type jsonOptions struct {
	pretty          bool
	indent          string
	itemSep, keySep string
	ensureASCII     bool
	sortKeys        bool
}

// toJSON is Python's json.dumps of a template value.
func toJSON(v any, o jsonOptions) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v any, o jsonOptions, depth int) error {
	if depth > maxNesting {
		return fmt.Errorf("tojson: value nested too deeply")
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		switch {
		case math.IsNaN(v):
			b.WriteString("NaN")
		case math.IsInf(v, 1):
			b.WriteString("Infinity")
		case math.IsInf(v, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(formatFloat(v))
		}
	case string:
		pyjson.Quote(b, v, o.ensureASCII)
	case []any:
		return writeJSONArray(b, v, o, depth)
	case tuple:
		return writeJSONArray(b, v, o, depth)
	case *dict:
		if v.len() == 0 {
			b.WriteString("{}")
			return nil
		}
		order := make([]int, v.len())
		for i := range order {
			order[i] = i
		}
		if o.sortKeys {
			var err error
			sort.SliceStable(order, func(i, j int) bool {
				c, e := compare(v.keys[order[i]], v.keys[order[j]])
				if e != nil {
					err = e
				}
				return c == -1
			})
			if err != nil {
				return err
			}
		}
		b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				b.WriteString(o.itemSep)
			}
			writeJSONIndent(b, o, depth+1)
			var key string
			switch k := v.keys[i].(type) {
			case string:
				key = k
			case nil:
				key = "null"
			case bool:
				key = "false"
				if k {
					key = "true"
				}
			case int64:
				key = strconv.FormatInt(k, 10)
			case float64:
				key = formatFloat(k)
			default:
				return fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			pyjson.Quote(b, key, o.ensureASCII)
			b.WriteString(o.keySep)
			if err := writeJSON(b, v.vals[i], o, depth+1); err != nil {
				return err
			}
		}
		writeJSONIndent(b, o, depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func writeJSONArray(b *strings.Builder, items []any, o jsonOptions, depth int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, x := range items {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		writeJSONIndent(b, o, depth+1)
		if err := writeJSON(b, x, o, depth+1); err != nil {
			return err
		}
	}
	writeJSONIndent(b, o, depth)
	b.WriteByte(']')
	return nil
}

func writeJSONIndent(b *strings.Builder, o jsonOptions, depth int) {
	if !o.pretty {
		return
	}
	b.WriteByte('\n')
	for i := 0; i < depth; i++ {
		b.WriteString(o.indent)
	}
}

// fromGo turns a Go value from Options.Extra into a template value. Maps
// become dicts with sorted keys; json.RawMessage is decoded keeping the
// order of object keys; other types (structs, pointers) go through
// encoding/json, so struct fields keep their declared order.
func fromGo(v any) (any, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case bool, string, int64, float64:
		return v, nil
	case int:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case float32:
		return float64(v), nil
	case json.Number:
		return numberValue(v)
	case json.RawMessage:
		return decodeJSON(v)
	case Message:
		return messageValue(v)
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			y, err := fromGo(x)
			if err != nil {
				return nil, err
			}
			out[i] = y
		}
		return out, nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := newDict(len(keys))
		for _, k := range keys {
			x, err := fromGo(v[k])
			if err != nil {
				return nil, err
			}
			d.set(k, x)
		}
		return d, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if u := rv.Uint(); u <= math.MaxInt64 {
			return int64(u), nil
		}
		return float64(rv.Uint()), nil
	case reflect.Float32, reflect.Float64:
		return rv.Float(), nil
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.String:
		return rv.String(), nil
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return nil, nil
		}
		out := make([]any, rv.Len())
		for i := range out {
			y, err := fromGo(rv.Index(i).Interface())
			if err != nil {
				return nil, err
			}
			out[i] = y
		}
		return out, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		if rv.IsNil() {
			return nil, nil
		}
		m := make(map[string]any, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			m[it.Key().String()] = it.Value().Interface()
		}
		return fromGo(m)
	case reflect.Func, reflect.Chan, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return nil, fmt.Errorf("chat: cannot pass a %T to a template", v)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("chat: cannot pass a %T to a template: %w", v, err)
	}
	return decodeJSON(data)
}

func messageValue(m Message) (*dict, error) {
	d := newDict(2)
	d.set("role", m.Role)
	d.set("content", m.Content)
	if len(m.ToolCalls) > 0 {
		calls := make([]any, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			args, err := decodeJSON(c.Function.Arguments)
			if err != nil {
				return nil, fmt.Errorf("chat: tool call %q arguments: %w", c.Function.Name, err)
			}
			fn := newDict(2)
			fn.set("name", c.Function.Name)
			fn.set("arguments", args)
			call := newDict(3)
			call.set("id", c.ID)
			call.set("type", "function")
			call.set("function", fn)
			calls[i] = call
		}
		d.set("tool_calls", calls)
	}
	if m.ToolCallID != "" {
		d.set("tool_call_id", m.ToolCallID)
	}
	if m.Name != "" {
		d.set("name", m.Name)
	}
	return d, nil
}

func numberValue(n json.Number) (any, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return nil, fmt.Errorf("chat: bad JSON number %q", n)
	}
	return f, nil
}

// decodeJSON decodes one JSON value, keeping object keys in order.
func decodeJSON(data []byte) (any, error) {
	v, err := orderedjson.Decoder{MaxDepth: maxNesting, NewObject: func() orderedjson.Object { return newDict(0) }, Number: numberValue}.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("chat: bad JSON: %w", err)
	}
	return v, nil
}

// Set adds a decoded JSON member: a repeated key keeps its place and
// takes the later value, as Python's json.loads does.
func (d *dict) Set(k string, v any) error {
	d.set(k, v)
	return nil
}
