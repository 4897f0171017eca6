package orderedjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// pairs is an Object that records its members in order and refuses
// duplicate keys.
type pairs struct{ keys, vals []string }

func (p *pairs) Set(k string, v any) error {
	for _, have := range p.keys {
		if have == k {
			return fmt.Errorf("duplicate key %q", k)
		}
	}
	p.keys, p.vals = append(p.keys, k), append(p.vals, fmt.Sprint(v))
	return nil
}

func TestDecode(t *testing.T) {
	d := Decoder{MaxDepth: 3, NewObject: func() Object { return &pairs{} }}
	v, err := d.Decode([]byte(` {"z": 1.50, "a": [true, null, "s"], "m": {}} `))
	if err != nil {
		t.Fatal(err)
	}
	p := v.(*pairs)
	if strings.Join(p.keys, ",") != "z,a,m" || p.vals[0] != "1.50" || p.vals[1] != "[true <nil> s]" {
		t.Fatalf("decoded %+v", p)
	}
	d.Number = func(n json.Number) (any, error) { return n.Float64() }
	if v, _ := d.Decode([]byte(`[2e1]`)); v.([]any)[0] != 20.0 {
		t.Fatalf("number conversion: %v", v)
	}
	for in, want := range map[string]string{
		`{"a": 1, "a": 2}`: "duplicate key",
		`[[[[1]]]]`:        "nested more than 3 deep",
		`{} {}`:            ErrTrailing.Error(),
		`{"a": }`:          "invalid character",
		`[1,`:              "EOF",
	} {
		if _, err := d.Decode([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s) = %v, want %q", in, err, want)
		}
	}
	if _, err := d.Decode([]byte(`1 2`)); !errors.Is(err, ErrTrailing) {
		t.Errorf("trailing value: %v", err)
	}
}
