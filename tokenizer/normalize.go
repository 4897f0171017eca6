package tokenizer

import (
	"strings"
	"unicode"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a span of text before pre-tokenization (tokenizer.json
// "normalizer"). Implementations are immutable and safe for concurrent use.
type normalizer interface {
	normalize(s string) string
}

type normalizerSeq []normalizer

func (q normalizerSeq) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// nfcNormalizer and nfdNormalizer apply Unicode canonical normalization
// (NFC and NFD, UAX #15) with golang.org/x/text/unicode/norm, which returns
// text already in the form as it is, without allocating.
type nfcNormalizer struct{}

func (nfcNormalizer) normalize(s string) string { return norm.NFC.String(s) }

type nfdNormalizer struct{}

func (nfdNormalizer) normalize(s string) string { return norm.NFD.String(s) }

// prependNormalizer puts a prefix in front of non-empty text.
type prependNormalizer struct{ prefix string }

func (p prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

// replaceNormalizer replaces every occurrence of a literal string.
type replaceNormalizer struct{ old, new string }

func (r replaceNormalizer) normalize(s string) string {
	if r.old == "" {
		return s
	}
	return strings.ReplaceAll(s, r.old, r.new)
}

// regexpReplaceNormalizer replaces every match of a regex.
type regexpReplaceNormalizer struct {
	re  *regexp2.Regexp
	new string
}

func (r regexpReplaceNormalizer) normalize(s string) string {
	out, err := r.re.ReplaceFunc(s, func(regexp2.Match) string { return r.new }, -1, -1)
	if err != nil {
		return s
	}
	return out
}

// stripNormalizer removes leading and/or trailing whitespace.
type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}
