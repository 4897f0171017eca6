package pyjson

import (
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	cases := []struct {
		in          string
		ascii, utf8 string
	}{
		{`a"b\c`, `"a\"b\\c"`, `"a\"b\\c"`},
		{"tab\tnl\n\x01\x7f", `"tab\tnl\n\u0001\u007f"`, "\"tab\\tnl\\n\\u0001\x7f\""},
		{"café 😀", `"caf\u00e9 \ud83d\ude00"`, `"café 😀"`},
		{"\xff", `"\ufffd"`, "\"\xff\""},
	}
	for _, c := range cases {
		for _, mode := range []struct {
			ascii bool
			want  string
		}{{true, c.ascii}, {false, c.utf8}} {
			var b strings.Builder
			Quote(&b, c.in, mode.ascii)
			if b.String() != mode.want {
				t.Errorf("Quote(%q, %v) = %s, want %s", c.in, mode.ascii, b.String(), mode.want)
			}
		}
	}
}
