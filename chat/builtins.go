package chat

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type filterFunc func(r *renderer, v any, args []any, kwargs *dict) (any, error)
type testFunc func(r *renderer, v any, args []any) (bool, error)

// filters are Jinja2's built-in filters that chat templates use, with
// transformers' tojson. The parser rejects any other name.
var filters map[string]filterFunc

// tests are Jinja2's built-in tests.
var tests map[string]testFunc

func init() {
	filters = map[string]filterFunc{
		"abs":         filterAbs,
		"attr":        filterAttr,
		"batch":       filterBatch,
		"capitalize":  stringFilter(pyCapitalize),
		"center":      filterCenter,
		"count":       filterLength,
		"d":           filterDefault,
		"default":     filterDefault,
		"dictsort":    filterDictsort,
		"e":           filterEscape,
		"escape":      filterEscape,
		"first":       filterFirst,
		"float":       filterFloat,
		"forceescape": filterEscape,
		"format":      filterFormat,
		"indent":      filterIndent,
		"int":         filterInt,
		"items":       filterItems,
		"join":        filterJoin,
		"last":        filterLast,
		"length":      filterLength,
		"list":        filterList,
		"lower":       stringFilter(strings.ToLower),
		"map":         filterMap,
		"max":         minMaxFilter(1),
		"min":         minMaxFilter(-1),
		"reject":      selectFilter(false, false),
		"rejectattr":  selectFilter(false, true),
		"replace":     filterReplace,
		"reverse":     filterReverse,
		"round":       filterRound,
		"safe":        stringFilter(func(s string) string { return s }),
		"select":      selectFilter(true, false),
		"selectattr":  selectFilter(true, true),
		"sort":        filterSort,
		"string":      stringFilter(func(s string) string { return s }),
		"sum":         filterSum,
		"title":       stringFilter(jinjaTitle),
		"tojson":      filterToJSON,
		"trim":        filterTrim,
		"unique":      filterUnique,
		"upper":       stringFilter(strings.ToUpper),
		"wordcount":   filterWordcount,
	}
	tests = map[string]testFunc{
		"boolean": typeTest(func(v any) bool { _, ok := v.(bool); return ok }),
		"callable": typeTest(func(v any) bool {
			switch v.(type) {
			case *function, undefined: // Jinja2's Undefined is callable (and fails when called)
				return true
			}
			return false
		}),
		"defined": typeTest(func(v any) bool { _, ok := v.(undefined); return !ok }),
		"divisibleby": func(r *renderer, v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("divisibleby takes 1 argument")
			}
			m, err := arith("%", v, args[0])
			return err == nil && equal(m, int64(0)), err
		},
		"eq":          compareTest("=="),
		"equalto":     compareTest("=="),
		"==":          compareTest("=="),
		"escaped":     typeTest(func(any) bool { return false }),
		"even":        parityTest(0),
		"false":       typeTest(func(v any) bool { b, ok := v.(bool); return ok && !b }),
		"filter":      typeTest(func(v any) bool { s, ok := v.(string); return ok && filters[s] != nil }),
		"float":       typeTest(func(v any) bool { _, ok := v.(float64); return ok }),
		"ge":          compareTest(">="),
		">=":          compareTest(">="),
		"gt":          compareTest(">"),
		"greaterthan": compareTest(">"),
		">":           compareTest(">"),
		"in": func(r *renderer, v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("in takes 1 argument")
			}
			return contains(args[0], v)
		},
		"integer":  typeTest(func(v any) bool { _, ok := v.(int64); return ok }),
		"iterable": typeTest(func(v any) bool { _, err := iterate(v); return err == nil }),
		"le":       compareTest("<="),
		"<=":       compareTest("<="),
		"lower": typeTest(func(v any) bool {
			s := str(v)
			return strings.ToLower(s) == s && strings.ToUpper(s) != s
		}),
		"lt":       compareTest("<"),
		"lessthan": compareTest("<"),
		"<":        compareTest("<"),
		"mapping":  typeTest(func(v any) bool { _, ok := v.(*dict); return ok }),
		"ne":       compareTest("!="),
		"!=":       compareTest("!="),
		"none":     typeTest(func(v any) bool { return v == nil }),
		"number":   typeTest(func(v any) bool { _, ok := asNumber(v); return ok }),
		"odd":      parityTest(1),
		"sameas": func(r *renderer, v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("sameas takes 1 argument")
			}
			return sameAs(v, args[0]), nil
		},
		"sequence": typeTest(func(v any) bool {
			switch v.(type) {
			case string, []any, tuple, *dict, undefined:
				return true
			}
			return false
		}),
		"string":    typeTest(func(v any) bool { _, ok := v.(string); return ok }),
		"test":      typeTest(func(v any) bool { s, ok := v.(string); return ok && tests[s] != nil }),
		"true":      typeTest(func(v any) bool { b, ok := v.(bool); return ok && b }),
		"undefined": typeTest(func(v any) bool { _, ok := v.(undefined); return ok }),
		"upper": typeTest(func(v any) bool {
			s := str(v)
			return strings.ToUpper(s) == s && strings.ToLower(s) != s
		}),
	}
}

func typeTest(f func(any) bool) testFunc {
	return func(_ *renderer, v any, args []any) (bool, error) {
		if len(args) != 0 {
			return false, fmt.Errorf("test takes no arguments")
		}
		return f(v), nil
	}
}

func compareTest(op string) testFunc {
	return func(_ *renderer, v any, args []any) (bool, error) {
		if len(args) != 1 {
			return false, fmt.Errorf("test takes 1 argument")
		}
		return compareOp(op, v, args[0])
	}
}

func parityTest(rem int64) testFunc {
	return func(_ *renderer, v any, args []any) (bool, error) {
		m, err := arith("%", v, int64(2))
		if err != nil {
			return false, err
		}
		return equal(m, rem), nil
	}
}

// sameAs is Python's "is" as far as templates can observe it.
func sameAs(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case bool:
		bb, ok := b.(bool)
		return ok && a == bb
	case int64, float64, string:
		return a == b
	case []any:
		bl, ok := b.([]any)
		return ok && len(a) == len(bl) && (len(a) == 0 || &a[0] == &bl[0])
	case *dict, *namespace, *function, *loopInfo:
		return a == b
	}
	return false
}

// bind matches a call's arguments to parameter names; defaults holds the
// default values of the last len(defaults) names.
func bind(fname string, args []any, kwargs *dict, names []string, defaults ...any) ([]any, error) {
	if len(args) > len(names) {
		return nil, fmt.Errorf("%s() takes at most %d arguments (%d given)", fname, len(names), len(args))
	}
	out := make([]any, len(names))
	firstDefault := len(names) - len(defaults)
	for i, n := range names {
		if i < len(args) {
			if _, dup := kwargs.get(n); dup {
				return nil, fmt.Errorf("%s() got multiple values for argument '%s'", fname, n)
			}
			out[i] = args[i]
			continue
		}
		if v, ok := kwargs.get(n); ok {
			out[i] = v
			continue
		}
		if i < firstDefault {
			return nil, fmt.Errorf("%s() missing required argument '%s'", fname, n)
		}
		out[i] = defaults[i-firstDefault]
	}
	if kwargs != nil {
		for _, k := range kwargs.keys {
			if s, ok := k.(string); !ok || !containsString(names, s) {
				return nil, fmt.Errorf("%s() got an unexpected keyword argument '%v'", fname, k)
			}
		}
	}
	return out, nil
}

func toInt(v any, what string) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case bool:
		if v {
			return 1, nil
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%s must be an integer, not %s", what, typeName(v))
}

func stringFilter(f func(string) string) filterFunc {
	return func(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
		if len(args) > 0 || kwargs.len() > 0 {
			return nil, fmt.Errorf("filter takes no arguments")
		}
		return f(str(v)), nil
	}
}

func filterAbs(_ *renderer, v any, _ []any, _ *dict) (any, error) {
	n, ok := asNumber(v)
	if !ok {
		return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
	}
	if i, ok := n.(int64); ok {
		if i == math.MinInt64 {
			return nil, fmt.Errorf("integer overflow")
		}
		return max(i, -i), nil
	}
	return math.Abs(n.(float64)), nil
}

func filterAttr(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("attr", args, kwargs, []string{"name"})
	if err != nil {
		return nil, err
	}
	name, ok := a[0].(string)
	if !ok {
		return nil, fmt.Errorf("attribute name must be a string")
	}
	switch o := v.(type) {
	case *namespace, *loopInfo:
		return getAttr(o, name)
	}
	// Only attributes (methods), never items: d|attr('key') is undefined.
	if m, ok := method(v, name); ok {
		return m, nil
	}
	return undefined{hint: fmt.Sprintf("'%s object' has no attribute '%s'", typeName(v), name)}, nil
}

// filterBatch is Jinja2's batch: lists of n items, the last one filled
// up with fill_with when given.
func filterBatch(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("batch", args, kwargs, []string{"linecount", "fill_with"}, nil)
	if err != nil {
		return nil, err
	}
	n, err := toInt(a[0], "linecount")
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("batch size must be positive")
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := []any{}
	for len(items) > 0 {
		k := int(min(n, int64(len(items))))
		b := append([]any{}, items[:k]...)
		items = items[k:]
		for a[1] != nil && len(b) < int(n) {
			b = append(b, a[1])
		}
		out = append(out, b)
	}
	return out, nil
}

func filterCenter(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("center", args, kwargs, []string{"width"}, int64(80))
	if err != nil {
		return nil, err
	}
	w, err := toInt(a[0], "width")
	if err != nil {
		return nil, err
	}
	return pyCenter(str(v), int(min(w, 1<<20)), " "), nil
}

func filterLength(_ *renderer, v any, _ []any, _ *dict) (any, error) {
	n, err := length(v)
	return int64(n), err
}

func filterDefault(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("default", args, kwargs, []string{"default_value", "boolean"}, "", false)
	if err != nil {
		return nil, err
	}
	if _, isU := v.(undefined); isU || (truth(a[1]) && !truth(v)) {
		return a[0], nil
	}
	return v, nil
}

func filterDictsort(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("dictsort", args, kwargs, []string{"case_sensitive", "by", "reverse"}, false, "key", false)
	if err != nil {
		return nil, err
	}
	d, ok := v.(*dict)
	if !ok {
		return nil, fmt.Errorf("dictsort needs a dict, not %s", typeName(v))
	}
	pos := 0
	switch a[1] {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, fmt.Errorf("you can only sort by either 'key' or 'value'")
	}
	items := dictItems(d)
	err = sortValues(items, func(x any) any { return ignoreCase(x.(tuple)[pos], truth(a[0])) }, truth(a[2]))
	return items, err
}

func dictItems(d *dict) []any {
	items := make([]any, d.len())
	for i, k := range d.keys {
		items[i] = tuple{k, d.vals[i]}
	}
	return items
}

func ignoreCase(v any, caseSensitive bool) any {
	if s, ok := v.(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

func filterEscape(_ *renderer, v any, _ []any, _ *dict) (any, error) {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(str(v)), nil
}

func filterFirst(_ *renderer, v any, _ []any, _ *dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefined{hint: "no first item, sequence was empty"}, nil
	}
	return items[0], nil
}

func filterLast(_ *renderer, v any, _ []any, _ *dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefined{hint: "no last item, sequence was empty"}, nil
	}
	return items[len(items)-1], nil
}

func filterFloat(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("float", args, kwargs, []string{"default"}, 0.0)
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case int64, float64, bool:
		return toFloat(x), nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimFunc(strings.ReplaceAll(x, "_", ""), pyIsSpace), 64); err == nil {
			return f, nil
		}
	}
	return a[0], nil
}

func filterInt(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("int", args, kwargs, []string{"default", "base"}, int64(0), int64(10))
	if err != nil {
		return nil, err
	}
	base, err := toInt(a[1], "base")
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case int64:
		return x, nil
	case bool:
		return toInt(x, "")
	case float64:
		if !math.IsNaN(x) && !math.IsInf(x, 0) && math.Abs(x) < 1<<63 {
			return int64(x), nil
		}
	case string:
		s := strings.TrimFunc(x, pyIsSpace)
		digits := strings.ReplaceAll(s, "_", "")
		if prefix := map[int64]string{16: "0x", 8: "0o", 2: "0b"}[base]; prefix != "" {
			sign := ""
			if digits != "" && (digits[0] == '-' || digits[0] == '+') {
				sign, digits = digits[:1], digits[1:]
			}
			if len(digits) > 2 && strings.EqualFold(digits[:2], prefix) {
				digits = digits[2:]
			}
			digits = sign + digits
		}
		if i, err := strconv.ParseInt(digits, int(base), 64); err == nil {
			return i, nil
		}
		if base == 10 {
			if f, err := strconv.ParseFloat(s, 64); err == nil && math.Abs(f) < 1<<63 {
				return int64(f), nil
			}
		}
	}
	return a[0], nil
}

func filterFormat(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	if len(args) > 0 && kwargs.len() > 0 {
		return nil, fmt.Errorf("can't handle positional and keyword arguments at the same time")
	}
	if kwargs.len() > 0 {
		return printf(str(v), kwargs)
	}
	return printf(str(v), tuple(args))
}

// filterIndent is Jinja2's indent: every line but the first (and blank
// ones unless blank) gets width spaces, or the width string.
func filterIndent(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("indent", args, kwargs, []string{"width", "first", "blank"}, int64(4), false, false)
	if err != nil {
		return nil, err
	}
	ind, ok := a[0].(string)
	if !ok {
		w, err := toInt(a[0], "width")
		if err != nil {
			return nil, err
		}
		ind = strings.Repeat(" ", int(max(0, min(w, 1<<16))))
	}
	lines := pySplitLines(str(v) + "\n")
	var b strings.Builder
	if truth(a[2]) {
		b.WriteString(strings.Join(lines, "\n"+ind))
	} else {
		b.WriteString(lines[0])
		for _, l := range lines[1:] {
			b.WriteByte('\n')
			if l != "" {
				b.WriteString(ind)
			}
			b.WriteString(l)
		}
	}
	if truth(a[1]) {
		return ind + b.String(), nil
	}
	return b.String(), nil
}

func filterItems(_ *renderer, v any, _ []any, _ *dict) (any, error) {
	switch d := v.(type) {
	case undefined:
		return []any{}, nil
	case *dict:
		return dictItems(d), nil
	}
	return nil, fmt.Errorf("can only get item pairs from a mapping, not %s", typeName(v))
}

func filterJoin(r *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("join", args, kwargs, []string{"d", "attribute"}, "", nil)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	sep := str(a[0])
	var b strings.Builder
	for i, x := range items {
		if a[1] != nil {
			if x, err = attrPath(x, a[1]); err != nil {
				return nil, err
			}
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(str(x))
		if err := r.checkSize(b.Len()); err != nil {
			return nil, err
		}
	}
	return b.String(), nil
}

func filterList(_ *renderer, v any, _ []any, _ *dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return append([]any{}, items...), nil
}

// attrPath follows a dotted attribute path ("a.b", "items.0") as
// Jinja2's make_attrgetter does.
func attrPath(v any, path any) (any, error) {
	if n, ok := path.(int64); ok {
		return getItem(v, n)
	}
	p, ok := path.(string)
	if !ok {
		return nil, fmt.Errorf("attribute must be a string or an integer")
	}
	for _, part := range strings.Split(p, ".") {
		var key any = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		var err error
		if v, err = getItem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func filterMap(r *renderer, v any, args []any, kwargs *dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	if len(args) == 0 {
		attr, ok := kwargs.get("attribute")
		if !ok {
			return nil, fmt.Errorf("map needs a filter name or attribute=")
		}
		def, hasDef := kwargs.get("default")
		for i, x := range items {
			y, err := attrPath(x, attr)
			if err != nil {
				return nil, err
			}
			if _, isU := y.(undefined); isU && hasDef {
				y = def
			}
			out[i] = y
		}
		return out, nil
	}
	name, ok := args[0].(string)
	f := filters[name]
	if !ok || f == nil {
		return nil, fmt.Errorf("no filter named %s", repr(args[0]))
	}
	for i, x := range items {
		if err := r.step(1); err != nil {
			return nil, err
		}
		if out[i], err = f(r, x, args[1:], kwargs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func minMaxFilter(sign int) filterFunc {
	return func(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
		a, err := bind("min/max", args, kwargs, []string{"case_sensitive", "attribute"}, false, nil)
		if err != nil {
			return nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{hint: "no aggregated item, sequence was empty"}, nil
		}
		key := func(x any) (any, error) {
			if a[1] != nil {
				var err error
				if x, err = attrPath(x, a[1]); err != nil {
					return nil, err
				}
			}
			return ignoreCase(x, truth(a[0])), nil
		}
		best := items[0]
		bk, err := key(best)
		if err != nil {
			return nil, err
		}
		for _, x := range items[1:] {
			k, err := key(x)
			if err != nil {
				return nil, err
			}
			c, err := compare(k, bk)
			if err != nil {
				return nil, err
			}
			if c == sign {
				best, bk = x, k
			}
		}
		return best, nil
	}
}

// selectFilter makes select, reject, selectattr and rejectattr.
func selectFilter(keep, byAttr bool) filterFunc {
	return func(r *renderer, v any, args []any, kwargs *dict) (any, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		var attr any
		if byAttr {
			if len(args) == 0 {
				return nil, fmt.Errorf("missing parameter for attribute name")
			}
			attr, args = args[0], args[1:]
		}
		test := func(x any) (bool, error) { return truth(x), nil }
		if len(args) > 0 {
			name, ok := args[0].(string)
			t := tests[name]
			if !ok || t == nil {
				return nil, fmt.Errorf("no test named %s", repr(args[0]))
			}
			targs := args[1:]
			test = func(x any) (bool, error) { return t(r, x, targs) }
		}
		out := []any{}
		for _, x := range items {
			if err := r.step(1); err != nil {
				return nil, err
			}
			y := x
			if byAttr {
				if y, err = attrPath(x, attr); err != nil {
					return nil, err
				}
			}
			ok, err := test(y)
			if err != nil {
				return nil, err
			}
			if ok == keep {
				out = append(out, x)
			}
		}
		return out, nil
	}
}

func filterReplace(r *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("replace", args, kwargs, []string{"old", "new", "count"}, nil)
	if err != nil {
		return nil, err
	}
	n := int64(-1)
	if a[2] != nil {
		if n, err = toInt(a[2], "count"); err != nil {
			return nil, err
		}
	}
	return pyReplace(r, str(v), str(a[0]), str(a[1]), n)
}

func pyReplace(r *renderer, s, old, new string, n int64) (any, error) {
	if n < 0 {
		n = -1
	}
	count := strings.Count(s, old)
	if old == "" {
		count = utf8.RuneCountInString(s) + 1
	}
	if n >= 0 && int64(count) > n {
		count = int(n)
	}
	if err := r.checkSize(len(s) + count*(len(new)-len(old))); err != nil {
		return nil, err
	}
	return strings.Replace(s, old, new, int(max(n, -1))), nil
}

func filterReverse(_ *renderer, v any, _ []any, _ *dict) (any, error) {
	if s, ok := v.(string); ok {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, x := range items {
		out[len(items)-1-i] = x
	}
	return out, nil
}

// filterRound is Jinja2's round: "common" is Python's round (half to
// even on the exact binary value), "ceil" and "floor" round away.
func filterRound(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("round", args, kwargs, []string{"precision", "method"}, int64(0), "common")
	if err != nil {
		return nil, err
	}
	prec, err := toInt(a[0], "precision")
	if err != nil {
		return nil, err
	}
	n, ok := asNumber(v)
	if !ok {
		return nil, fmt.Errorf("round needs a number, not %s", typeName(v))
	}
	method := a[1]
	if i, isInt := n.(int64); isInt && method == "common" {
		return i, nil
	}
	f := toFloat(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return f, nil
	}
	switch method {
	case "common":
		if prec < 0 || prec > 300 {
			p := math.Pow(10, float64(prec))
			return math.RoundToEven(f*p) / p, nil
		}
		out, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(prec), 64), 64)
		return out, nil
	case "ceil", "floor":
		p := math.Pow(10, float64(prec))
		if method == "ceil" {
			return math.Ceil(f*p) / p, nil
		}
		return math.Floor(f*p) / p, nil
	}
	return nil, fmt.Errorf("method must be 'common', 'ceil' or 'floor'")
}

func filterSort(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("sort", args, kwargs, []string{"reverse", "case_sensitive", "attribute"}, false, false, nil)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := append([]any{}, items...)
	var keyErr error
	err = sortValues(out, func(x any) any {
		if a[2] != nil {
			y, err := attrPath(x, a[2])
			if err != nil {
				keyErr = err
			}
			x = y
		}
		return ignoreCase(x, truth(a[1]))
	}, truth(a[0]))
	if keyErr != nil {
		return nil, keyErr
	}
	return out, err
}

func filterSum(r *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("sum", args, kwargs, []string{"attribute", "start"}, nil, int64(0))
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	total := a[1]
	for _, x := range items {
		if a[0] != nil {
			if x, err = attrPath(x, a[0]); err != nil {
				return nil, err
			}
		}
		if total, err = r.binary("+", total, x); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterToJSON(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("tojson", args, kwargs, []string{"indent", "ensure_ascii", "separators", "sort_keys"}, nil, false, nil, false)
	if err != nil {
		return nil, err
	}
	opts := jsonOptions{ensureASCII: truth(a[1]), sortKeys: truth(a[3])}
	switch ind := a[0].(type) {
	case nil:
	case string:
		opts.indent, opts.pretty = ind, true
	default:
		n, err := toInt(ind, "indent")
		if err != nil {
			return nil, err
		}
		opts.indent, opts.pretty = strings.Repeat(" ", int(max(0, min(n, 1<<10)))), true
	}
	opts.itemSep, opts.keySep = ", ", ": "
	if opts.pretty {
		opts.itemSep = ","
	}
	if a[2] != nil {
		seps, err := iterate(a[2])
		if err != nil || len(seps) != 2 {
			return nil, fmt.Errorf("separators must be a pair of strings")
		}
		opts.itemSep, opts.keySep = str(seps[0]), str(seps[1])
	}
	return toJSON(v, opts)
}

func filterTrim(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("trim", args, kwargs, []string{"chars"}, nil)
	if err != nil {
		return nil, err
	}
	return pyStrip(str(v), a[0], true, true), nil
}

func filterUnique(_ *renderer, v any, args []any, kwargs *dict) (any, error) {
	a, err := bind("unique", args, kwargs, []string{"case_sensitive", "attribute"}, false, nil)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var seen []any
	out := []any{}
	for _, x := range items {
		k := x
		if a[1] != nil {
			if k, err = attrPath(x, a[1]); err != nil {
				return nil, err
			}
		}
		k = ignoreCase(k, truth(a[0]))
		dup := false
		for _, s := range seen {
			if equal(s, k) {
				dup = true
				break
			}
		}
		if !dup {
			seen = append(seen, k)
			out = append(out, x)
		}
	}
	return out, nil
}

func filterWordcount(_ *renderer, v any, _ []any, _ *dict) (any, error) {
	n := 0
	inWord := false
	for _, r := range str(v) {
		w := r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
		if w && !inWord {
			n++
		}
		inWord = w
	}
	return int64(n), nil
}

// jinjaTitle is Jinja2's title filter: each word, split at whitespace and
// -({[<, gets an uppercase first letter and lowercase rest.
func jinjaTitle(s string) string {
	var b strings.Builder
	start := true
	for _, r := range s {
		boundary := pyIsSpace(r) || strings.ContainsRune("-({[<", r)
		switch {
		case boundary:
			b.WriteRune(r)
		case start:
			b.WriteRune(unicode.ToUpper(r))
		default:
			b.WriteRune(unicode.ToLower(r))
		}
		start = boundary
	}
	return b.String()
}

// globals are the functions every template sees.
func globals() map[string]any {
	return map[string]any{
		"range": &function{name: "range", call: globalRange},
		"dict": &function{name: "dict", call: func(_ *renderer, args []any, kwargs *dict) (any, error) {
			return dictFromArgs("dict", args, kwargs)
		}},
		"namespace": &function{name: "namespace", call: func(_ *renderer, args []any, kwargs *dict) (any, error) {
			d, err := dictFromArgs("namespace", args, kwargs)
			if err != nil {
				return nil, err
			}
			return &namespace{attrs: d}, nil
		}},
		"raise_exception": &function{name: "raise_exception", call: func(_ *renderer, args []any, kwargs *dict) (any, error) {
			a, err := bind("raise_exception", args, kwargs, []string{"message"})
			if err != nil {
				return nil, err
			}
			return nil, &RaiseError{Message: str(a[0])}
		}},
		"strftime_now": &function{name: "strftime_now", call: func(r *renderer, args []any, kwargs *dict) (any, error) {
			a, err := bind("strftime_now", args, kwargs, []string{"format"})
			if err != nil {
				return nil, err
			}
			f, ok := a[0].(string)
			if !ok {
				return nil, fmt.Errorf("strftime_now() argument must be str, not %s", typeName(a[0]))
			}
			return strftime(r.now(), f), nil
		}},
	}
}

func dictFromArgs(name string, args []any, kwargs *dict) (*dict, error) {
	if len(args) > 1 {
		return nil, fmt.Errorf("%s expected at most 1 argument, got %d", name, len(args))
	}
	d := newDict(kwargs.len())
	if len(args) == 1 {
		switch src := args[0].(type) {
		case *dict:
			d = src.copy()
		default:
			pairs, err := iterate(src)
			if err != nil {
				return nil, err
			}
			for _, p := range pairs {
				kv, err := iterate(p)
				if err != nil || len(kv) != 2 {
					return nil, fmt.Errorf("%s update sequence element has wrong length", name)
				}
				if !hashable(kv[0]) {
					return nil, fmt.Errorf("unhashable type: '%s'", typeName(kv[0]))
				}
				d.set(kv[0], kv[1])
			}
		}
	}
	if kwargs != nil {
		for i, k := range kwargs.keys {
			d.set(k, kwargs.vals[i])
		}
	}
	return d, nil
}

func globalRange(r *renderer, args []any, kwargs *dict) (any, error) {
	if kwargs.len() > 0 {
		return nil, fmt.Errorf("range() takes no keyword arguments")
	}
	var start, stop, step int64 = 0, 0, 1
	nums := make([]int64, len(args))
	for i, a := range args {
		n, err := toInt(a, "range() argument")
		if err != nil {
			return nil, err
		}
		nums[i] = n
	}
	switch len(nums) {
	case 1:
		stop = nums[0]
	case 2:
		start, stop = nums[0], nums[1]
	case 3:
		start, stop, step = nums[0], nums[1], nums[2]
	default:
		return nil, fmt.Errorf("range expected 1 to 3 arguments, got %d", len(args))
	}
	if step == 0 {
		return nil, fmt.Errorf("range() arg 3 must not be zero")
	}
	var n float64
	if step > 0 && stop > start {
		n = math.Ceil((float64(stop) - float64(start)) / float64(step))
	} else if step < 0 && stop < start {
		n = math.Ceil((float64(start) - float64(stop)) / -float64(step))
	}
	if n > float64(r.maxSteps-r.steps) {
		return nil, &LimitError{Msg: fmt.Sprintf("range of %.0f items exceeds the %d steps left", n, r.maxSteps-r.steps)}
	}
	if err := r.step(int(n)); err != nil {
		return nil, err
	}
	out := make([]any, 0, int(n))
	for i := int64(0); i < int64(n); i++ {
		out = append(out, start+i*step)
	}
	return out, nil
}
