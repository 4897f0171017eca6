package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int
	content    string
	special    bool
	normalized bool // matched in normalized text rather than raw text
	lstrip     bool // swallows the whitespace on its left
	rstrip     bool // swallows the whitespace on its right
	singleWord bool // matches only between word boundaries
}

// addedMatcher finds added tokens in text: leftmost match first, the
// longest one at that position (what Hugging Face's Aho-Corasick
// LeftmostLongest and transformers.js's trie both do).
type addedMatcher struct {
	first     [256]bool // bytes that start some token
	onlyFirst int       // the one byte all tokens start with, or -1
	nodes     []trieNode
}

type trieNode struct {
	next map[byte]int32
	tok  int32 // index into tokens, or -1
}

func newAddedMatcher(tokens []addedToken, content func(addedToken) string) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{tok: -1}}, onlyFirst: -1}
	firsts := 0
	for i, t := range tokens {
		c := content(t)
		if c == "" {
			continue
		}
		if !m.first[c[0]] {
			m.first[c[0]] = true
			m.onlyFirst = int(c[0])
			firsts++
		}
		n := int32(0)
		for j := 0; j < len(c); j++ {
			nx, ok := m.nodes[n].next[c[j]]
			if !ok {
				if m.nodes[n].next == nil {
					m.nodes[n].next = make(map[byte]int32)
				}
				nx = int32(len(m.nodes))
				m.nodes[n].next[c[j]] = nx
				m.nodes = append(m.nodes, trieNode{tok: -1})
			}
			n = nx
		}
		m.nodes[n].tok = int32(i)
	}
	if firsts != 1 {
		m.onlyFirst = -1
	}
	return m
}

// longestAt returns the index of the longest token that s[i:] starts with
// and its length, or -1.
func (m *addedMatcher) longestAt(s string, i int) (tok, n int) {
	tok = -1
	node := int32(0)
	for j := i; j < len(s); j++ {
		nx, ok := m.nodes[node].next[s[j]]
		if !ok {
			break
		}
		node = nx
		if t := m.nodes[node].tok; t >= 0 {
			tok, n = int(t), j+1-i
		}
	}
	return tok, n
}

// span is a piece of text, or an added token when tok >= 0.
type span struct {
	text string
	tok  int // index into the tokens the matcher was built from, or -1
	at   int // byte offset of text in the string that was split
}

// split cuts s into text spans and added-token spans, appending them to dst.
func (m *addedMatcher) split(dst []span, s string, tokens []addedToken) []span {
	if len(m.nodes) == 1 {
		return append(dst, span{text: s, tok: -1})
	}
	start := 0 // start of the pending text span
	for i := 0; i < len(s); {
		if m.onlyFirst >= 0 {
			k := strings.IndexByte(s[i:], byte(m.onlyFirst))
			if k < 0 {
				break
			}
			i += k
		} else if !m.first[s[i]] {
			i++
			continue
		}
		ti, n := m.longestAt(s, i)
		if ti < 0 {
			i++
			continue
		}
		t := tokens[ti]
		end := i + n
		if t.singleWord && (isWordBefore(s, i) || isWordAfter(s, end)) {
			i++
			continue
		}
		from := i
		if t.lstrip {
			for from > start {
				r, size := utf8.DecodeLastRuneInString(s[start:from])
				if !unicode.IsSpace(r) {
					break
				}
				from -= size
			}
		}
		if t.rstrip {
			for end < len(s) {
				r, size := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += size
			}
		}
		if from > start {
			dst = append(dst, span{text: s[start:from], tok: -1, at: start})
		}
		dst = append(dst, span{tok: ti, at: from})
		start, i = end, end
	}
	if start < len(s) {
		dst = append(dst, span{text: s[start:], tok: -1, at: start})
	}
	return dst
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

func isWordBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return isWordRune(r)
}

func isWordAfter(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isWordRune(r)
}
