package chat

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// printf is Python's "format % args" (printf-style formatting): args is a
// tuple of values, a dict for %(name)s fields, or one value.
func printf(format string, args any) (string, error) {
	var list []any
	mapping, _ := args.(*dict)
	switch a := args.(type) {
	case tuple:
		list = a
	default:
		list = []any{a}
	}
	next := 0
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", fmt.Errorf("incomplete format")
		}
		if format[i] == '%' {
			b.WriteByte('%')
			continue
		}
		var arg any
		named := false
		if format[i] == '(' {
			j := strings.IndexByte(format[i:], ')')
			if j < 0 {
				return "", fmt.Errorf("incomplete format key")
			}
			if mapping == nil {
				return "", fmt.Errorf("format requires a mapping")
			}
			v, ok := mapping.get(format[i+1 : i+j])
			if !ok {
				return "", fmt.Errorf("KeyError: '%s'", format[i+1:i+j])
			}
			arg, named = v, true
			i += j + 1
		}
		flags := ""
		for i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0 {
			flags += string(format[i])
			i++
		}
		readNum := func() (int, bool, error) {
			if i < len(format) && format[i] == '*' {
				i++
				if next >= len(list) {
					return 0, false, fmt.Errorf("not enough arguments for format string")
				}
				n, err := toInt(list[next], "* width")
				next++
				return int(max(-1<<20, min(n, 1<<20))), true, err
			}
			j := i
			for i < len(format) && format[i] >= '0' && format[i] <= '9' {
				i++
			}
			if i == j {
				return 0, false, nil
			}
			n, err := strconv.Atoi(format[j:i])
			if err != nil || n > 1<<20 {
				return 0, false, fmt.Errorf("width too big")
			}
			return n, true, nil
		}
		width, hasWidth, err := readNum()
		if err != nil {
			return "", err
		}
		prec, hasPrec := 0, false
		if i < len(format) && format[i] == '.' {
			i++
			if prec, _, err = readNum(); err != nil {
				return "", err
			}
			hasPrec = true
		}
		for i < len(format) && strings.IndexByte("hlL", format[i]) >= 0 {
			i++
		}
		if i >= len(format) {
			return "", fmt.Errorf("incomplete format")
		}
		conv := format[i]
		if !named {
			if mapping != nil && len(list) == 1 && list[0] == args {
				arg = args
			} else {
				if next >= len(list) {
					return "", fmt.Errorf("not enough arguments for format string")
				}
				arg = list[next]
				next++
			}
		}
		s, err := formatOne(conv, arg, flags, prec, hasPrec)
		if err != nil {
			return "", err
		}
		if hasWidth {
			if width < 0 {
				flags += "-"
				width = -width
			}
			if pad := width - utf8.RuneCountInString(s); pad > 0 {
				switch {
				case strings.Contains(flags, "-"):
					s += strings.Repeat(" ", pad)
				case strings.Contains(flags, "0") && strings.IndexByte("diouxXeEfFgG", conv) >= 0:
					sign := ""
					if s != "" && strings.IndexByte("+- ", s[0]) >= 0 {
						sign, s = s[:1], s[1:]
					}
					s = sign + strings.Repeat("0", pad) + s
				default:
					s = strings.Repeat(" ", pad) + s
				}
			}
		}
		b.WriteString(s)
	}
	if mapping == nil && next < len(list) {
		return "", fmt.Errorf("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

func formatOne(conv byte, arg any, flags string, prec int, hasPrec bool) (string, error) {
	sign := func(s string, neg bool) string {
		switch {
		case neg:
			return "-" + s
		case strings.Contains(flags, "+"):
			return "+" + s
		case strings.Contains(flags, " "):
			return " " + s
		}
		return s
	}
	switch conv {
	case 's', 'r', 'a':
		s := str(arg)
		if conv != 's' {
			s = repr(arg)
		}
		if hasPrec {
			if rs := []rune(s); len(rs) > prec {
				s = string(rs[:prec])
			}
		}
		return s, nil
	case 'd', 'i', 'u', 'o', 'x', 'X':
		n, ok := asNumber(arg)
		if !ok {
			return "", fmt.Errorf("%%%c format: a real number is required, not %s", conv, typeName(arg))
		}
		var i int64
		switch n := n.(type) {
		case int64:
			i = n
		case float64:
			if conv != 'd' && conv != 'i' && conv != 'u' {
				return "", fmt.Errorf("%%%c format: an integer is required, not float", conv)
			}
			if math.IsNaN(n) || math.IsInf(n, 0) || math.Abs(n) >= 1<<63 {
				return "", fmt.Errorf("cannot convert float %s to integer", formatFloat(n))
			}
			i = int64(n)
		}
		neg := i < 0
		u := uint64(i)
		if neg {
			u = uint64(-i)
		}
		var s string
		switch conv {
		case 'o':
			s = strconv.FormatUint(u, 8)
			if strings.Contains(flags, "#") {
				s = "0o" + s
			}
		case 'x', 'X':
			s = strconv.FormatUint(u, 16)
			if strings.Contains(flags, "#") {
				s = "0x" + s
			}
			if conv == 'X' {
				s = strings.ToUpper(s)
			}
		default:
			s = strconv.FormatUint(u, 10)
		}
		if hasPrec && len(s) < prec {
			s = strings.Repeat("0", prec-len(s)) + s
		}
		return sign(s, neg), nil
	case 'e', 'E', 'f', 'F', 'g', 'G':
		n, ok := asNumber(arg)
		if !ok {
			return "", fmt.Errorf("must be real number, not %s", typeName(arg))
		}
		f := toFloat(n)
		if !hasPrec {
			prec = 6
		}
		prec = min(prec, 100)
		neg := math.Signbit(f) && !math.IsNaN(f)
		f = math.Abs(f)
		var s string
		switch {
		case math.IsInf(f, 0):
			s = "inf"
		case math.IsNaN(f):
			s = "nan"
		default:
			verb := conv | 0x20 // lower case
			s = strconv.FormatFloat(f, verb, prec, 64)
			if verb == 'g' {
				s = strconv.FormatFloat(f, 'g', max(prec, 1), 64)
				if strings.Contains(flags, "#") && !strings.Contains(s, ".") {
					s += "."
				}
			}
			if verb == 'e' || verb == 'g' {
				s = padExponent(s)
			}
		}
		if conv >= 'A' && conv <= 'Z' {
			s = strings.ToUpper(s)
		}
		return sign(s, neg), nil
	case 'c':
		switch a := arg.(type) {
		case int64:
			if a < 0 || a > 0x10ffff {
				return "", fmt.Errorf("%%c arg not in range(0x110000)")
			}
			return string(rune(a)), nil
		case string:
			if utf8.RuneCountInString(a) == 1 {
				return a, nil
			}
		}
		return "", fmt.Errorf("%%c requires int or char")
	}
	return "", fmt.Errorf("unsupported format character '%c'", conv)
}

// padExponent writes exponents with at least two digits, as C does
// (Go writes "1e+06" already; this guards "1e+6" from 'g').
func padExponent(s string) string {
	i := strings.IndexAny(s, "e")
	if i < 0 || i+2 >= len(s) {
		return s
	}
	digits := s[i+2:]
	if len(digits) < 2 {
		return s[:i+2] + "0" + digits
	}
	return s
}

var (
	weekdays = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	months   = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
)

// strftime is Python's time.strftime in the C locale. Directives:
// %a %A %b %B %c %d %e %f %H %I %j %m %M %p %S %U %w %W %x %X %y %Y %z %Z
// %%, and glibc's %-d style (no padding) for the numeric ones. Others
// print as written.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		noPad := false
		if format[i] == '-' && i+1 < len(format) {
			noPad = true
			i++
		}
		num := func(n, width int) {
			if noPad {
				b.WriteString(strconv.Itoa(n))
				return
			}
			fmt.Fprintf(&b, "%0*d", width, n)
		}
		switch format[i] {
		case 'a':
			b.WriteString(weekdays[t.Weekday()][:3])
		case 'A':
			b.WriteString(weekdays[t.Weekday()])
		case 'b', 'h':
			b.WriteString(months[t.Month()-1][:3])
		case 'B':
			b.WriteString(months[t.Month()-1])
		case 'c':
			b.WriteString(strftime(t, "%a %b %e %H:%M:%S %Y"))
		case 'd':
			num(t.Day(), 2)
		case 'e':
			if noPad {
				num(t.Day(), 1)
			} else {
				fmt.Fprintf(&b, "%2d", t.Day())
			}
		case 'f':
			num(t.Nanosecond()/1000, 6)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'm':
			num(int(t.Month()), 2)
		case 'M':
			num(t.Minute(), 2)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'S':
			num(t.Second(), 2)
		case 'U':
			num((t.YearDay()+6-int(t.Weekday()))/7, 2)
		case 'w':
			num(int(t.Weekday()), 1)
		case 'W':
			num((t.YearDay()+6-(int(t.Weekday())+6)%7)/7, 2)
		case 'x':
			b.WriteString(strftime(t, "%m/%d/%y"))
		case 'X':
			b.WriteString(strftime(t, "%H:%M:%S"))
		case 'y':
			num(t.Year()%100, 2)
		case 'Y':
			num(t.Year(), 1)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if noPad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
