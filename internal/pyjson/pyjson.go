// Package pyjson quotes strings exactly as Python's json module does, for
// output that must match byte for byte what transformers writes (sharded
// safetensors indexes, chat templates' tojson).
package pyjson

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Quote appends s to b as a JSON string the way json.dumps writes it:
// quotes, backslashes and control characters escaped (\n, \r, \t, \b, \f
// by name, others as \u00XX). With ensureASCII (json.dumps' default) every
// character outside printable ASCII is escaped as \uXXXX, above U+FFFF as
// a surrogate pair, and invalid UTF-8 as U+FFFD.
func Quote(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(b, `\u%04x`, r)
		case ensureASCII && r >= 0x7f:
			if r == utf8.RuneError && size == 1 {
				r = 0xfffd
			}
			if r > 0xffff {
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}
