package tagtext

import "testing"

func TestPartialSuffix(t *testing.T) {
	for _, c := range []struct {
		text, tag string
		want      int
	}{
		{"abc <tool", "<tool_call>", 5}, {"abc <", "<tool_call>", 1}, {"abc", "<tool_call>", 0},
		{"x <tool_call>", "<tool_call>", 0}, // a whole tag is not a part of one
		{"", "<t>", 0}, {"</thin", "</think>", 6},
	} {
		if got := PartialSuffix(c.text, c.tag); got != c.want {
			t.Errorf("PartialSuffix(%q, %q) = %d, want %d", c.text, c.tag, got, c.want)
		}
	}
}
