package chat

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Template values follow Python's data model as Jinja2 sees it. The Go
// types that stand for them:
//
//	nil        None
//	undefined  Jinja2's Undefined (a missing variable, attribute or item)
//	bool       bool
//	int64      int
//	float64    float
//	string     str
//	[]any      list
//	tuple      tuple
//	*dict      dict, keys in insertion order
//	*namespace the object namespace() returns
//	*function  a global, a bound method or a macro
//	*loopInfo  the loop variable of a for block
//
// Lists, tuples and dicts are never changed once built (the sandbox of
// transformers is immutable too), so they are shared freely.

// undefined is a missing value. hint is the message of the error raised
// when the value is used in a way that needs it to exist.
type undefined struct{ hint string }

type tuple []any

// dict is an ordered mapping. Keys are None, bool, int64, float64 or
// string (the hashable values templates build).
type dict struct {
	keys  []any
	index map[any]int
	vals  []any
}

func newDict(n int) *dict {
	return &dict{keys: make([]any, 0, n), index: make(map[any]int, n), vals: make([]any, 0, n)}
}

// hashKey maps equal Python keys to one Go map key (1, 1.0 and True are
// the same key in Python).
func hashKey(k any) any {
	switch k := k.(type) {
	case bool:
		if k {
			return int64(1)
		}
		return int64(0)
	case float64:
		if k == math.Trunc(k) && math.Abs(k) < 1<<63 {
			return int64(k)
		}
	}
	return k
}

func hashable(k any) bool {
	switch k.(type) {
	case nil, bool, int64, float64, string:
		return true
	}
	return false
}

func (d *dict) set(k, v any) {
	h := hashKey(k)
	if i, ok := d.index[h]; ok {
		d.vals[i] = v
		return
	}
	d.index[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
}

func (d *dict) get(k any) (any, bool) {
	if d == nil || !hashable(k) {
		return nil, false
	}
	i, ok := d.index[hashKey(k)]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

func (d *dict) len() int {
	if d == nil {
		return 0
	}
	return len(d.keys)
}

func (d *dict) copy() *dict {
	c := newDict(d.len())
	for i, k := range d.keys {
		c.set(k, d.vals[i])
	}
	return c
}

// namespace is the mutable object of namespace(); {% set ns.x = ... %}
// writes its attributes.
type namespace struct{ attrs *dict }

// function is anything a template can call: a global, a bound method, a
// macro. kwargs holds keyword arguments in call order.
type function struct {
	name string
	call func(r *renderer, args []any, kwargs *dict) (any, error)
}

// typeName is Python's type(v).__name__, used in error messages.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case tuple:
		return "tuple"
	case *dict:
		return "dict"
	case *namespace:
		return "Namespace"
	case *function:
		return "function"
	case *loopInfo:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

// truth is Python's bool(v).
func truth(v any) bool {
	switch v := v.(type) {
	case nil, undefined:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case tuple:
		return len(v) > 0
	case *dict:
		return v.len() > 0
	}
	return true
}

// str is Python's str(v), with Undefined printing as "".
func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case undefined:
		return ""
	}
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

// repr is Python's repr(v).
func repr(v any) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func writeRepr(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("None")
	case undefined:
		b.WriteString("")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(formatFloat(v))
	case string:
		writeStringRepr(b, v)
	case []any:
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, x)
		}
		b.WriteByte(']')
	case tuple:
		b.WriteByte('(')
		for i, x := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, x)
		}
		if len(v) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *dict:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k)
			b.WriteString(": ")
			writeRepr(b, v.vals[i])
		}
		b.WriteByte('}')
	case *namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, v.attrs)
		b.WriteByte('>')
	case *function:
		fmt.Fprintf(b, "<function %s>", v.name)
	case *loopInfo:
		fmt.Fprintf(b, "<LoopContext %d/%d>", v.index+1, len(v.items))
	default:
		fmt.Fprintf(b, "%v", v)
	}
}

// writeStringRepr quotes s as Python's repr does: single quotes unless s
// holds a single quote and no double quote.
func writeStringRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(b, `\x%02x`, s[i])
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r >= 0x80 && !unicode.IsPrint(r) && r != ' ':
			switch {
			case r <= 0xff:
				fmt.Fprintf(b, `\x%02x`, r)
			case r <= 0xffff:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				fmt.Fprintf(b, `\U%08x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte(q)
}

// formatFloat is Python's repr of a float: the shortest digits that read
// back exactly, in fixed notation for exponents from -4 to 15 and with at
// least one fractional digit there.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	sign := ""
	if e[0] == '-' {
		sign, e = "-", e[1:]
	}
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	decpt := exp + 1
	if decpt <= -4 || decpt > 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	switch {
	case decpt <= 0:
		return sign + "0." + strings.Repeat("0", -decpt) + digits
	case decpt >= len(digits):
		return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
	default:
		return sign + digits[:decpt] + "." + digits[decpt:]
	}
}

// isNumber reports whether v is a Python number (bool included) and
// returns it as int64 or float64.
func asNumber(v any) (any, bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return int64(1), true
		}
		return int64(0), true
	case int64, float64:
		return v, true
	}
	return nil, false
}

func toFloat(v any) float64 {
	switch v := v.(type) {
	case int64:
		return float64(v)
	case float64:
		return v
	case bool:
		if v {
			return 1
		}
	}
	return 0
}

// equal is Python's ==.
func equal(a, b any) bool {
	if na, ok := asNumber(a); ok {
		nb, ok := asNumber(b)
		if !ok {
			return false
		}
		ia, aInt := na.(int64)
		ib, bInt := nb.(int64)
		if aInt && bInt {
			return ia == ib
		}
		return toFloat(na) == toFloat(nb)
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case undefined:
		_, ok := b.(undefined)
		return ok
	case string:
		s, ok := b.(string)
		return ok && a == s
	case []any:
		l, ok := b.([]any)
		return ok && equalSeq(a, l)
	case tuple:
		l, ok := b.(tuple)
		return ok && equalSeq(a, l)
	case *dict:
		d, ok := b.(*dict)
		if !ok || a.len() != d.len() {
			return false
		}
		for i, k := range a.keys {
			v, ok := d.get(k)
			if !ok || !equal(a.vals[i], v) {
				return false
			}
		}
		return true
	}
	return a == b
}

func equalSeq(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// compare orders a and b as Python's < does; it fails on types Python
// cannot order.
func compare(a, b any) (int, error) {
	if na, ok := asNumber(a); ok {
		if nb, ok := asNumber(b); ok {
			ia, aInt := na.(int64)
			ib, bInt := nb.(int64)
			if aInt && bInt {
				return cmpOrdered(ia, ib), nil
			}
			fa, fb := toFloat(na), toFloat(nb)
			if math.IsNaN(fa) || math.IsNaN(fb) {
				return 2, nil // unordered: every comparison but != is false
			}
			return cmpOrdered(fa, fb), nil
		}
	}
	switch a := a.(type) {
	case string:
		if s, ok := b.(string); ok {
			return strings.Compare(a, s), nil
		}
	case []any:
		if l, ok := b.([]any); ok {
			return compareSeq(a, l)
		}
	case tuple:
		if l, ok := b.(tuple); ok {
			return compareSeq(a, l)
		}
	}
	if u, ok := a.(undefined); ok {
		return 0, u.err()
	}
	if u, ok := b.(undefined); ok {
		return 0, u.err()
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func cmpOrdered[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareSeq(a, b []any) (int, error) {
	for i := 0; i < len(a) && i < len(b); i++ {
		if equal(a[i], b[i]) {
			continue
		}
		return compare(a[i], b[i])
	}
	return cmpOrdered(int64(len(a)), int64(len(b))), nil
}

func (u undefined) err() error {
	if u.hint == "" {
		return fmt.Errorf("value is undefined")
	}
	return fmt.Errorf("%s", u.hint)
}

// length is Python's len(v); Undefined has length 0.
func length(v any) (int, error) {
	switch v := v.(type) {
	case string:
		return utf8.RuneCountInString(v), nil
	case []any:
		return len(v), nil
	case tuple:
		return len(v), nil
	case *dict:
		return v.len(), nil
	case undefined:
		return 0, nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

// iterate lists the items a for loop visits: list and tuple items, dict
// keys, the characters of a string; Undefined is empty.
func iterate(v any) ([]any, error) {
	switch v := v.(type) {
	case []any:
		return v, nil
	case tuple:
		return v, nil
	case *dict:
		return v.keys, nil
	case string:
		items := make([]any, 0, len(v))
		for _, r := range v {
			items = append(items, string(r))
		}
		return items, nil
	case undefined:
		return nil, nil
	case *namespace:
		return nil, fmt.Errorf("'Namespace' object is not iterable")
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

// contains is Python's "item in container".
func contains(container, item any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			if u, isU := item.(undefined); isU {
				return false, u.err()
			}
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case *dict:
		_, ok := c.get(item)
		return ok, nil
	case undefined:
		return false, nil
	}
	items, err := iterate(container)
	if err != nil {
		return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
	}
	for _, x := range items {
		if equal(x, item) {
			return true, nil
		}
	}
	return false, nil
}

// pyIsSpace is Python's str.isspace for one character.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// sortValues sorts items in place with Python's ordering; key maps each
// item to the value compared.
func sortValues(items []any, key func(any) any, reverse bool) error {
	var err error
	sort.SliceStable(items, func(i, j int) bool {
		if err != nil {
			return false
		}
		a, b := key(items[i]), key(items[j])
		if reverse {
			a, b = b, a
		}
		c, e := compare(a, b)
		if e != nil {
			err = e
		}
		return c == -1
	})
	return err
}
