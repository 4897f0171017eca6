package chat

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// method returns the bound method obj.name for the Python str, dict and
// list methods templates call. Methods that would change a list or dict
// fail when called, as in transformers' immutable sandbox.
func method(obj any, name string) (*function, bool) {
	var impl func(r *renderer, args []any, kwargs *dict) (any, error)
	switch o := obj.(type) {
	case string:
		m, ok := strMethods[name]
		if !ok {
			return nil, false
		}
		impl = func(r *renderer, args []any, kwargs *dict) (any, error) { return m(r, o, args, kwargs) }
	case *dict:
		switch name {
		case "items":
			impl = noArgs(name, func() any { return dictItems(o) })
		case "keys":
			impl = noArgs(name, func() any { return append([]any{}, o.keys...) })
		case "values":
			impl = noArgs(name, func() any { return append([]any{}, o.vals...) })
		case "copy":
			impl = noArgs(name, func() any { return o.copy() })
		case "get":
			impl = func(_ *renderer, args []any, kwargs *dict) (any, error) {
				a, err := bind("get", args, kwargs, []string{"key", "default"}, nil)
				if err != nil {
					return nil, err
				}
				if v, ok := o.get(a[0]); ok {
					return v, nil
				}
				return a[1], nil
			}
		case "pop", "popitem", "setdefault", "update", "clear":
			impl = unsafeMethod("dict", name)
		default:
			return nil, false
		}
	case []any:
		switch name {
		case "index", "count":
			impl = func(_ *renderer, args []any, kwargs *dict) (any, error) {
				a, err := bind(name, args, kwargs, []string{"value"})
				if err != nil {
					return nil, err
				}
				n := int64(0)
				for i, x := range o {
					if equal(x, a[0]) {
						if name == "index" {
							return int64(i), nil
						}
						n++
					}
				}
				if name == "index" {
					return nil, fmt.Errorf("%s is not in list", repr(a[0]))
				}
				return n, nil
			}
		case "copy":
			impl = noArgs(name, func() any { return append([]any{}, o...) })
		case "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear":
			impl = unsafeMethod("list", name)
		default:
			return nil, false
		}
	default:
		return nil, false
	}
	return &function{name: name, call: impl}, true
}

func noArgs(name string, f func() any) func(*renderer, []any, *dict) (any, error) {
	return func(_ *renderer, args []any, kwargs *dict) (any, error) {
		if len(args) > 0 || kwargs.len() > 0 {
			return nil, fmt.Errorf("%s() takes no arguments", name)
		}
		return f(), nil
	}
}

func unsafeMethod(typ, name string) func(*renderer, []any, *dict) (any, error) {
	return func(*renderer, []any, *dict) (any, error) {
		return nil, fmt.Errorf("access to attribute '%s' of '%s' object is unsafe", name, typ)
	}
}

type strMethod func(r *renderer, s string, args []any, kwargs *dict) (any, error)

var strMethods map[string]strMethod

func init() {
	strMethods = map[string]strMethod{
		"strip":  stripMethod("strip", true, true),
		"lstrip": stripMethod("lstrip", true, false),
		"rstrip": stripMethod("rstrip", false, true),
		"split":  splitMethod("split", false),
		"rsplit": splitMethod("rsplit", true),
		"splitlines": func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
			a, err := bind("splitlines", args, kwargs, []string{"keepends"}, false)
			if err != nil {
				return nil, err
			}
			lines := pySplitLines(s)
			if truth(a[0]) {
				lines = pySplitLinesKeep(s)
			}
			out := []any{}
			for _, l := range lines {
				out = append(out, l)
			}
			return out, nil
		},
		"startswith": affixMethod("startswith", strings.HasPrefix),
		"endswith":   affixMethod("endswith", strings.HasSuffix),
		"upper":      strNoArgs("upper", strings.ToUpper),
		"lower":      strNoArgs("lower", strings.ToLower),
		"casefold":   strNoArgs("casefold", strings.ToLower),
		"title":      strNoArgs("title", pyTitle),
		"capitalize": strNoArgs("capitalize", pyCapitalize),
		"swapcase": strNoArgs("swapcase", func(s string) string {
			return strings.Map(func(r rune) rune {
				if unicode.IsUpper(r) {
					return unicode.ToLower(r)
				}
				return unicode.ToUpper(r)
			}, s)
		}),
		"replace": func(r *renderer, s string, args []any, kwargs *dict) (any, error) {
			a, err := bind("replace", args, kwargs, []string{"old", "new", "count"}, int64(-1))
			if err != nil {
				return nil, err
			}
			old, ok1 := a[0].(string)
			new, ok2 := a[1].(string)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("replace() arguments must be str")
			}
			n, err := toInt(a[2], "count")
			if err != nil {
				return nil, err
			}
			return pyReplace(r, s, old, new, n)
		},
		"find":   findMethod("find", false, false),
		"rfind":  findMethod("rfind", true, false),
		"index":  findMethod("index", false, true),
		"rindex": findMethod("rindex", true, true),
		"count": func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
			a, err := bind("count", args, kwargs, []string{"sub"})
			if err != nil {
				return nil, err
			}
			sub, ok := a[0].(string)
			if !ok {
				return nil, fmt.Errorf("count() argument must be str, not %s", typeName(a[0]))
			}
			if sub == "" {
				return int64(utf8.RuneCountInString(s) + 1), nil
			}
			return int64(strings.Count(s, sub)), nil
		},
		"join": func(r *renderer, s string, args []any, kwargs *dict) (any, error) {
			a, err := bind("join", args, kwargs, []string{"iterable"})
			if err != nil {
				return nil, err
			}
			items, err := iterate(a[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			n := 0
			for i, x := range items {
				p, ok := x.(string)
				if !ok {
					return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(x))
				}
				parts[i] = p
				n += len(p) + len(s)
			}
			if err := r.checkSize(n); err != nil {
				return nil, err
			}
			return strings.Join(parts, s), nil
		},
		"removeprefix": func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
			a, err := bind("removeprefix", args, kwargs, []string{"prefix"})
			if err != nil {
				return nil, err
			}
			return strings.TrimPrefix(s, str(a[0])), nil
		},
		"removesuffix": func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
			a, err := bind("removesuffix", args, kwargs, []string{"suffix"})
			if err != nil {
				return nil, err
			}
			return strings.TrimSuffix(s, str(a[0])), nil
		},
		"partition":  partitionMethod(false),
		"rpartition": partitionMethod(true),
		"center":     padMethod("center"),
		"ljust":      padMethod("ljust"),
		"rjust":      padMethod("rjust"),
		"zfill": func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
			a, err := bind("zfill", args, kwargs, []string{"width"})
			if err != nil {
				return nil, err
			}
			w, err := toInt(a[0], "width")
			if err != nil {
				return nil, err
			}
			n := int(min(w, 1<<20)) - utf8.RuneCountInString(s)
			if n <= 0 {
				return s, nil
			}
			sign := ""
			if s != "" && (s[0] == '+' || s[0] == '-') {
				sign, s = s[:1], s[1:]
			}
			return sign + strings.Repeat("0", n) + s, nil
		},
		"format":    formatMethod,
		"isalnum":   charClass(func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r) }),
		"isalpha":   charClass(unicode.IsLetter),
		"isdigit":   charClass(unicode.IsDigit),
		"isdecimal": charClass(unicode.IsDigit),
		"isnumeric": charClass(unicode.IsNumber),
		"isspace":   charClass(pyIsSpace),
		"isascii": func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
			for _, r := range s {
				if r >= 0x80 {
					return false, nil
				}
			}
			return true, nil
		},
		"islower": caseTest(unicode.IsLower, unicode.IsUpper),
		"isupper": caseTest(unicode.IsUpper, unicode.IsLower),
	}
}

func strNoArgs(name string, f func(string) string) strMethod {
	return func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
		if len(args) > 0 || kwargs.len() > 0 {
			return nil, fmt.Errorf("%s() takes no arguments", name)
		}
		return f(s), nil
	}
}

func charClass(f func(rune) bool) strMethod {
	return func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
		if s == "" {
			return false, nil
		}
		for _, r := range s {
			if !f(r) {
				return false, nil
			}
		}
		return true, nil
	}
}

// caseTest is str.islower / str.isupper: at least one cased character
// and none of the other case.
func caseTest(is, other func(rune) bool) strMethod {
	return func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
		found := false
		for _, r := range s {
			if other(r) || unicode.IsTitle(r) {
				return false, nil
			}
			if is(r) {
				found = true
			}
		}
		return found, nil
	}
}

func stripMethod(name string, left, right bool) strMethod {
	return func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
		a, err := bind(name, args, kwargs, []string{"chars"}, nil)
		if err != nil {
			return nil, err
		}
		if _, ok := a[0].(string); !ok && a[0] != nil {
			return nil, fmt.Errorf("%s arg must be None or str", name)
		}
		return pyStrip(s, a[0], left, right), nil
	}
}

// pyStrip is Python's str.strip family: whitespace when chars is None,
// else any of the characters of chars.
func pyStrip(s string, chars any, left, right bool) string {
	cut := pyIsSpace
	if c, ok := chars.(string); ok {
		cut = func(r rune) bool { return strings.ContainsRune(c, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, cut)
	}
	if right {
		s = strings.TrimRightFunc(s, cut)
	}
	return s
}

func splitMethod(name string, fromRight bool) strMethod {
	return func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
		a, err := bind(name, args, kwargs, []string{"sep", "maxsplit"}, nil, int64(-1))
		if err != nil {
			return nil, err
		}
		maxSplit, err := toInt(a[1], "maxsplit")
		if err != nil {
			return nil, err
		}
		var parts []string
		switch sep := a[0].(type) {
		case nil:
			parts = splitWhitespace(s, int(max(maxSplit, -1)), fromRight)
		case string:
			if sep == "" {
				return nil, fmt.Errorf("empty separator")
			}
			n := -1
			if maxSplit >= 0 {
				n = int(min(maxSplit, 1<<30)) + 1
			}
			if fromRight {
				parts = rsplitN(s, sep, n)
			} else {
				parts = strings.SplitN(s, sep, n)
			}
		default:
			return nil, fmt.Errorf("must be str or None, not %s", typeName(sep))
		}
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return out, nil
	}
}

func rsplitN(s, sep string, n int) []string {
	if n < 0 {
		return strings.Split(s, sep)
	}
	var rev []string
	for len(rev) < n-1 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		rev = append(rev, s[i+len(sep):])
		s = s[:i]
	}
	out := []string{s}
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// splitWhitespace is str.split() without a separator: runs of whitespace
// separate, and leading and trailing whitespace gives no empty parts.
func splitWhitespace(s string, maxSplit int, fromRight bool) []string {
	if !fromRight {
		var out []string
		for {
			s = strings.TrimLeftFunc(s, pyIsSpace)
			if s == "" {
				return out
			}
			if maxSplit >= 0 && len(out) == maxSplit {
				return append(out, s)
			}
			i := strings.IndexFunc(s, pyIsSpace)
			if i < 0 {
				return append(out, s)
			}
			out = append(out, s[:i])
			s = s[i:]
		}
	}
	var rev []string
	for {
		s = strings.TrimRightFunc(s, pyIsSpace)
		if s == "" {
			break
		}
		if maxSplit >= 0 && len(rev) == maxSplit {
			rev = append(rev, s)
			break
		}
		i := strings.LastIndexFunc(s, pyIsSpace)
		if i < 0 {
			rev = append(rev, s)
			break
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		rev = append(rev, s[i+size:])
		s = s[:i]
	}
	out := make([]string, len(rev))
	for i := range rev {
		out[i] = rev[len(rev)-1-i]
	}
	return out
}

func affixMethod(name string, has func(s, affix string) bool) strMethod {
	return func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
		a, err := bind(name, args, kwargs, []string{"affix", "start", "end"}, nil, nil)
		if err != nil {
			return nil, err
		}
		s, err = substr(s, a[1], a[2])
		if err != nil {
			return nil, err
		}
		switch x := a[0].(type) {
		case string:
			return has(s, x), nil
		case tuple, []any:
			items, _ := iterate(x)
			for _, it := range items {
				p, ok := it.(string)
				if !ok {
					return nil, fmt.Errorf("tuple for %s must only contain str, not %s", name, typeName(it))
				}
				if has(s, p) {
					return true, nil
				}
			}
			return false, nil
		}
		return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(a[0]))
	}
}

// substr is s[start:end] in characters, for the optional bounds of
// startswith, find and their kin.
func substr(s string, start, end any) (string, error) {
	if start == nil && end == nil {
		return s, nil
	}
	var bounds [2]*int64
	for i, b := range []any{start, end} {
		if b == nil {
			continue
		}
		n, err := toInt(b, "slice index")
		if err != nil {
			return "", err
		}
		bounds[i] = &n
	}
	v, err := slice(s, bounds[0], bounds[1], nil)
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

func findMethod(name string, fromRight, raise bool) strMethod {
	return func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
		a, err := bind(name, args, kwargs, []string{"sub", "start", "end"}, nil, nil)
		if err != nil {
			return nil, err
		}
		sub, ok := a[0].(string)
		if !ok {
			return nil, fmt.Errorf("%s() argument must be str, not %s", name, typeName(a[0]))
		}
		offset := 0
		if a[1] != nil {
			n, err := toInt(a[1], "start")
			if err != nil {
				return nil, err
			}
			total := int64(utf8.RuneCountInString(s))
			if n < 0 {
				n = max(0, n+total)
			}
			offset = int(min(n, total))
		}
		t, err := substr(s, a[1], a[2])
		if err != nil {
			return nil, err
		}
		var i int
		if fromRight {
			i = strings.LastIndex(t, sub)
		} else {
			i = strings.Index(t, sub)
		}
		if i < 0 {
			if raise {
				return nil, fmt.Errorf("substring not found")
			}
			return int64(-1), nil
		}
		return int64(offset + utf8.RuneCountInString(t[:i])), nil
	}
}

func partitionMethod(fromRight bool) strMethod {
	return func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
		a, err := bind("partition", args, kwargs, []string{"sep"})
		if err != nil {
			return nil, err
		}
		sep, ok := a[0].(string)
		if !ok || sep == "" {
			return nil, fmt.Errorf("partition() needs a non-empty str separator")
		}
		i := strings.Index(s, sep)
		if fromRight {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if fromRight {
				return tuple{"", "", s}, nil
			}
			return tuple{s, "", ""}, nil
		}
		return tuple{s[:i], sep, s[i+len(sep):]}, nil
	}
}

func padMethod(name string) strMethod {
	return func(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
		a, err := bind(name, args, kwargs, []string{"width", "fillchar"}, " ")
		if err != nil {
			return nil, err
		}
		w, err := toInt(a[0], "width")
		if err != nil {
			return nil, err
		}
		fill, ok := a[1].(string)
		if !ok || utf8.RuneCountInString(fill) != 1 {
			return nil, fmt.Errorf("the fill character must be exactly one character long")
		}
		width := int(min(w, 1<<20))
		n := width - utf8.RuneCountInString(s)
		if n <= 0 {
			return s, nil
		}
		switch name {
		case "ljust":
			return s + strings.Repeat(fill, n), nil
		case "rjust":
			return strings.Repeat(fill, n) + s, nil
		}
		return pyCenter(s, width, fill), nil
	}
}

// pyCenter is str.center, which splits an odd padding as CPython does
// (left = pad/2 + (pad & width & 1)).
func pyCenter(s string, width int, fill string) string {
	pad := width - utf8.RuneCountInString(s)
	if pad <= 0 {
		return s
	}
	left := pad/2 + (pad & width & 1)
	return strings.Repeat(fill, left) + s + strings.Repeat(fill, pad-left)
}

// pyCapitalize is str.capitalize: the first character in title case,
// the rest lower case.
func pyCapitalize(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if size == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + strings.ToLower(s[size:])
}

// pyTitle is str.title: a cased character after an uncased one starts a
// word.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		cased := unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
		switch {
		case cased && !prevCased:
			b.WriteRune(unicode.ToTitle(r))
		case cased:
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
		prevCased = cased
	}
	return b.String()
}

func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// pySplitLinesKeep is str.splitlines(keepends=True).
func pySplitLinesKeep(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !isLineBreak(r) {
			i += size
			continue
		}
		end := i + size
		if r == '\r' && end < len(s) && s[end] == '\n' {
			end++
		}
		out = append(out, s[start:end])
		start, i = end, end
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// pySplitLines is str.splitlines().
func pySplitLines(s string) []string {
	lines := pySplitLinesKeep(s)
	for i, l := range lines {
		if strings.HasSuffix(l, "\r\n") {
			lines[i] = l[:len(l)-2]
			continue
		}
		_, size := utf8.DecodeLastRuneInString(l)
		if r, _ := utf8.DecodeLastRuneInString(l); isLineBreak(r) {
			lines[i] = l[:len(l)-size]
		}
	}
	return lines
}

// formatMethod is str.format with automatic ({}) or numbered ({0})
// fields, named fields from keyword arguments, "!s"/"!r" conversions and
// no format specs beyond an empty one.
func formatMethod(_ *renderer, s string, args []any, kwargs *dict) (any, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				b.WriteByte('}')
				i++
				continue
			}
			return nil, fmt.Errorf("single '}' encountered in format string")
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("single '{' encountered in format string")
		}
		field := s[i+1 : i+j]
		i += j
		conv := ""
		if k := strings.IndexByte(field, '!'); k >= 0 {
			field, conv = field[:k], field[k+1:]
		}
		if k := strings.IndexByte(field, ':'); k >= 0 {
			if field[k+1:] != "" {
				return nil, fmt.Errorf("format specs are not supported in chat templates")
			}
			field = field[:k]
		}
		var v any
		switch {
		case field == "":
			if auto >= len(args) {
				return nil, fmt.Errorf("replacement index %d out of range", auto)
			}
			v = args[auto]
			auto++
		case field[0] >= '0' && field[0] <= '9':
			var n int
			if _, err := fmt.Sscan(field, &n); err != nil || n >= len(args) {
				return nil, fmt.Errorf("replacement index %s out of range", field)
			}
			v = args[n]
		default:
			x, ok := kwargs.get(field)
			if !ok {
				return nil, fmt.Errorf("KeyError: '%s'", field)
			}
			v = x
		}
		switch conv {
		case "", "s":
			b.WriteString(str(v))
		case "r":
			b.WriteString(repr(v))
		default:
			return nil, fmt.Errorf("unknown conversion specifier %s", conv)
		}
	}
	return b.String(), nil
}
