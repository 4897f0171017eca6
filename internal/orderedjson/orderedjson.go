// Package orderedjson decodes JSON keeping each object's keys in the
// order the text writes them, which Go maps forget: a JSON Schema's
// properties are generated in that order, and a chat template iterates a
// tool's arguments in it.
package orderedjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Object receives an object's members in order.
type Object interface {
	Set(key string, value any) error
}

// Decoder decodes JSON into the caller's object and number values.
type Decoder struct {
	// MaxDepth bounds the nesting of arrays and objects: each level is a
	// frame of the recursion, and hostile input could otherwise overflow
	// the goroutine's stack, a fatal error.
	MaxDepth int
	// NewObject returns an empty object, which Decode fills with Set and
	// returns as the object's value.
	NewObject func() Object
	// Number converts a number; nil keeps the json.Number.
	Number func(json.Number) (any, error)
}

// ErrTrailing is returned for text after the JSON value.
var ErrTrailing = errors.New("text after the JSON value")

// Decode decodes one JSON text: objects through NewObject, numbers
// through Number, arrays as []any, and strings, booleans and null as
// encoding/json gives them.
func (d Decoder) Decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := d.value(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, ErrTrailing
	}
	return v, nil
}

func (d Decoder) value(dec *json.Decoder, depth int) (any, error) {
	if depth > d.MaxDepth {
		return nil, fmt.Errorf("nested more than %d deep", d.MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := d.NewObject()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := d.value(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if err := o.Set(kt.(string), v); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token() // '}'
			return o, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := d.value(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token() // ']'
			return list, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		if d.Number != nil {
			return d.Number(t)
		}
	}
	return tok, nil // nil, bool, string, or a kept json.Number
}
