package tokenizer

import (
	"testing"
	"unicode"
	"unicode/utf8"
)

var (
	nfc = nfcNormalizer{}.normalize
	nfd = nfdNormalizer{}.normalize
)

func TestNFC(t *testing.T) {
	// Expected values from Python's unicodedata.normalize, and for the
	// Unicode 15 marks from JavaScript's String.prototype.normalize.
	for _, c := range []struct{ in, nfc, nfd string }{
		{"", "", ""},
		{"plain ASCII", "plain ASCII", "plain ASCII"},
		{"cafe\u0301", "café", "cafe\u0301"},
		{"café", "café", "cafe\u0301"},
		{"e\u0301\u0300", "\u00e9\u0300", "e\u0301\u0300"},
		{"a\u0328\u0301", "\u0105\u0301", "a\u0328\u0301"},
		{"a\u0301\u0328", "\u0105\u0301", "a\u0328\u0301"}, // reordered by combining class
		{"\u212b", "\u00c5", "A\u030a"},                    // singleton
		{"\u2126", "\u03a9", "\u03a9"},
		{"\u0958", "\u0915\u093c", "\u0915\u093c"}, // composition exclusion
		{"\u1100\u1161\u11a8", "\uac01", "\u1100\u1161\u11a8"},
		{"\uac00\u11a8", "\uac01", "\u1100\u1161\u11a8"},
		{"\uac01", "\uac01", "\u1100\u1161\u11a8"},
		{"Tie\u0302\u0301ng Vie\u0323\u0302t", "Tiếng Việt", "Tie\u0302\u0301ng Vie\u0323\u0302t"},
		{"A\u0327\u0301", "\u00c1\u0327", "A\u0327\u0301"},
		{"C\u0327\u0301", "\u1e08", "C\u0327\u0301"},
		{"x\u0345\u0301", "x\u0301\u0345", "x\u0301\u0345"},
		{"\u0344", "\u0308\u0301", "\u0308\u0301"},                         // non-starter decomposition
		{"\u0b47\u0b3e", "\u0b4b", "\u0b47\u0b3e"},                         // two starters compose
		{"\u0b47\u0300\u0b3e", "\u0b47\u0300\u0b3e", "\u0b47\u0300\u0b3e"}, // blocked
		{"\u1e0a\u0323", "\u1e0c\u0307", "D\u0323\u0307"},
		{"\u0300a", "\u0300a", "\u0300a"},
		{"ǖ", "ǖ", "u\u0308\u0304"},
		// U+1E4EC and U+1E4ED (Nag Mundari signs, new in Unicode 15) have
		// combining class 232, so a following U+0301 (class 230) moves in
		// front of them and composes with the base letter. Unicode 14 data
		// gives them class 0 and leaves the text as it is.
		{"\U0001e4ec", "\U0001e4ec", "\U0001e4ec"},
		{"\U0001e4ed", "\U0001e4ed", "\U0001e4ed"},
		{"a\U0001e4ec\u0301", "\u00e1\U0001e4ec", "a\u0301\U0001e4ec"},
		{"e\U0001e4ed\u0301", "\u00e9\U0001e4ed", "e\u0301\U0001e4ed"},
	} {
		if got := nfc(c.in); got != c.nfc {
			t.Errorf("NFC(%+q) = %+q, want %+q", c.in, got, c.nfc)
		}
		if got := nfd(c.in); got != c.nfd {
			t.Errorf("NFD(%+q) = %+q, want %+q", c.in, got, c.nfd)
		}
	}
}

// TestNFCNoAllocation checks that text already in the form comes back
// without a copy.
func TestNFCNoAllocation(t *testing.T) {
	for _, s := range []string{"plain ASCII", "café", "Tiếng Việt", "\uac01"} {
		if n := testing.AllocsPerRun(100, func() { _ = nfc(s) }); n != 0 {
			t.Errorf("NFC(%+q): %v allocations", s, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = nfd("plain ASCII") }); n != 0 {
		t.Errorf("NFD of ASCII: %v allocations", n)
	}
}

// TestNFCMatchesJS compares with String.prototype.normalize("NFC") over the
// corpus (recorded by reference.mjs).
func TestNFCMatchesJS(t *testing.T) {
	ref, _ := reference(t, "qwen3", options{})
	for _, c := range ref.Cases {
		if got := nfc(c.Text); got != c.NFC {
			t.Errorf("NFC(%+q) = %+q, JS gives %+q", c.Text, got, c.NFC)
		}
	}
}

// TestNFCProperties checks, for every assigned code point alone and after a
// base letter, that normalization forms are stable and consistent.
func TestNFCProperties(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) || !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z) {
			continue
		}
		for _, s := range []string{string(r), "a" + string(r), string(r) + "\u0301"} {
			nfcS, nfdS := nfc(s), nfd(s)
			if nfc(nfcS) != nfcS || nfd(nfdS) != nfdS {
				t.Fatalf("%+q: not idempotent", s)
			}
			if nfc(nfdS) != nfcS || nfd(nfcS) != nfdS {
				t.Fatalf("%+q: NFC %+q and NFD %+q disagree", s, nfcS, nfdS)
			}
		}
	}
}
