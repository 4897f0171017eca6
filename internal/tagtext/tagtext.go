// Package tagtext holds what the readers of a model's streamed text
// (packages reasoning and toolcall) share: how much of a tag a text may be
// ending in, and the whitespace models write around tags.
package tagtext

// PartialSuffix is the length of the longest suffix of text that is a
// proper prefix of tag: the bytes to hold back, as they may begin it.
func PartialSuffix(text, tag string) int {
	for n := min(len(text), len(tag)-1); n > 0; n-- {
		if text[len(text)-n:] == tag[:n] {
			return n
		}
	}
	return 0
}

// IsSpace is ASCII whitespace, what models write around tags: a byte
// test, so that text split inside a character reads as it does whole.
func IsSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }
