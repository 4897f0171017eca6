package tokenizer

import (
	"sort"
	"unicode/utf8"
)

//go:generate sh -c "python3 gen_nfc_tables.py && gofmt -w nfc_tables.go"

// Unicode canonical normalization (NFC and NFD, UAX #15) for the NFC/NFD
// normalizers, built from nfc_tables.go. Hangul syllables are handled
// algorithmically.

const (
	hangulSBase  = 0xAC00
	hangulLBase  = 0x1100
	hangulVBase  = 0x1161
	hangulTBase  = 0x11A7
	hangulLCount = 19
	hangulVCount = 21
	hangulTCount = 28
	hangulNCount = hangulVCount * hangulTCount
	hangulSCount = hangulLCount * hangulNCount
)

var (
	nfcDecomp  map[rune][2]rune // one-level canonical decomposition
	nfcCompose map[[2]rune]rune // primary composites
	nfcSecond  map[rune]bool    // runes that can be the second half of a composite
)

func init() {
	nfcDecomp = make(map[rune][2]rune, len(nfcDecompositions))
	nfcCompose = make(map[[2]rune]rune, len(nfcDecompositions))
	nfcSecond = make(map[rune]bool)
	for _, d := range nfcDecompositions {
		nfcDecomp[d[0]] = [2]rune{d[1], d[2]}
		if d[3] == 1 {
			nfcCompose[[2]rune{d[1], d[2]}] = d[0]
			nfcSecond[d[2]] = true
		}
	}
}

// combiningClass returns the canonical combining class of r.
func combiningClass(r rune) uint8 {
	if r < 0x300 {
		return 0
	}
	i := sort.Search(len(nfcCombiningClasses), func(i int) bool { return nfcCombiningClasses[i].hi >= r })
	if i < len(nfcCombiningClasses) && nfcCombiningClasses[i].lo <= r {
		return nfcCombiningClasses[i].class
	}
	return 0
}

// nfcInert reports whether r is left alone by NFC whatever its neighbours:
// it is its own NFC form (no decomposition, or a primary composite), a
// starter, and never the second half of a composite.
func nfcInert(r rune) bool {
	if r < 0x300 {
		return true
	}
	if r >= hangulSBase && r < hangulSBase+hangulSCount {
		return true // composes only with a following trailing jamo, which is not inert
	}
	if r >= hangulLBase && r < hangulTBase+hangulTCount {
		return false
	}
	if d, ok := nfcDecomp[r]; ok {
		if c, ok := nfcCompose[d]; !ok || c != r {
			return false
		}
	}
	return combiningClass(r) == 0 && !nfcSecond[r]
}

// nfdInert reports whether r is its own NFD form and a starter.
func nfdInert(r rune) bool {
	if r < 0x300 {
		return r < 0xC0 // Latin-1 letters from U+00C0 decompose
	}
	if r >= hangulSBase && r < hangulSBase+hangulSCount {
		return false
	}
	if _, ok := nfcDecomp[r]; ok {
		return false
	}
	return combiningClass(r) == 0
}

// normalizeNFC returns s in Normalization Form C, or s itself when it is
// already (the common case, found without allocating).
func normalizeNFC(s string) string {
	if allRunes(s, nfcInert) {
		return s
	}
	return string(compose(decompose(s)))
}

// normalizeNFD returns s in Normalization Form D.
func normalizeNFD(s string) string {
	if allRunes(s, nfdInert) {
		return s
	}
	return string(decompose(s))
}

// allRunes reports whether every rune of s satisfies f; ASCII always does.
func allRunes(s string, f func(rune) bool) bool {
	for i := 0; i < len(s); {
		if s[i] < 0x80 {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if !f(r) {
			return false
		}
		i += n
	}
	return true
}

// decompose returns the canonical decomposition of s in canonical order.
func decompose(s string) []rune {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		out = appendDecomposed(out, r)
	}
	// Canonical ordering: stable sort of each run of non-starters by class.
	for i := 0; i < len(out); {
		if combiningClass(out[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(out) && combiningClass(out[j]) != 0 {
			j++
		}
		run := out[i:j]
		sort.SliceStable(run, func(a, b int) bool { return combiningClass(run[a]) < combiningClass(run[b]) })
		i = j
	}
	return out
}

func appendDecomposed(out []rune, r rune) []rune {
	if r >= hangulSBase && r < hangulSBase+hangulSCount {
		s := r - hangulSBase
		out = append(out, hangulLBase+s/hangulNCount, hangulVBase+(s%hangulNCount)/hangulTCount)
		if t := s % hangulTCount; t != 0 {
			out = append(out, hangulTBase+t)
		}
		return out
	}
	d, ok := nfcDecomp[r]
	if !ok {
		return append(out, r)
	}
	out = appendDecomposed(out, d[0])
	if d[1] != 0 {
		out = appendDecomposed(out, d[1])
	}
	return out
}

// composePair returns the primary composite of a and b, if any.
func composePair(a, b rune) (rune, bool) {
	if a >= hangulLBase && a < hangulLBase+hangulLCount && b >= hangulVBase && b < hangulVBase+hangulVCount {
		return hangulSBase + ((a-hangulLBase)*hangulVCount+(b-hangulVBase))*hangulTCount, true
	}
	if a >= hangulSBase && a < hangulSBase+hangulSCount && (a-hangulSBase)%hangulTCount == 0 &&
		b > hangulTBase && b < hangulTBase+hangulTCount {
		return a + (b - hangulTBase), true
	}
	c, ok := nfcCompose[[2]rune{a, b}]
	return c, ok
}

// compose applies canonical composition to a decomposed, canonically
// ordered rune sequence, in place.
func compose(rs []rune) []rune {
	out := rs[:0]
	starter := -1
	var lastClass uint8
	for _, r := range rs {
		cc := combiningClass(r)
		if starter >= 0 {
			adjacent := len(out)-1 == starter
			if adjacent || (lastClass != 0 && lastClass < cc) {
				if c, ok := composePair(out[starter], r); ok {
					out[starter] = c
					continue
				}
			}
		}
		out = append(out, r)
		if cc == 0 {
			starter = len(out) - 1
		}
		lastClass = cc
	}
	return out
}
