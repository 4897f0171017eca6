package tokenizer

import "strings"

// piece is a span of text on its way to the BPE model.
type piece struct {
	text string
	// atStart reports whether the piece begins at offset 0 of the text given
	// to Encode (Metaspace's prepend_scheme "first" looks at it).
	atStart bool
}

// preTokenizer cuts a piece into smaller ones (tokenizer.json
// "pre_tokenizer"); BPE merges never cross piece boundaries.
// Implementations are immutable and safe for concurrent use.
type preTokenizer interface {
	// split appends the pieces of p to dst; sc.matches is free for its use.
	split(dst []piece, p piece, sc *scratch) []piece
}

type preTokenizerSeq []preTokenizer

func (q preTokenizerSeq) split(dst []piece, p piece, sc *scratch) []piece {
	cur := []piece{p}
	for _, pt := range q {
		var next []piece
		for _, c := range cur {
			next = pt.split(next, c, sc)
		}
		cur = next
	}
	return append(dst, cur...)
}

// splitBehavior says what becomes of the matches of a Split pattern, as in
// Hugging Face's SplitDelimiterBehavior.
type splitBehavior int

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Removed":            splitRemoved,
	"Isolated":           splitIsolated,
	"MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext":     splitMergedWithNext,
	"Contiguous":         splitContiguous,
}

// splitPre is the Split pre-tokenizer (and Digits, which is a Split on
// numeric runes).
type splitPre struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

func (sp splitPre) split(dst []piece, p piece, sc *scratch) []piece {
	matches := sp.m.appendMatches(sc.matches[:0], p.text)
	sc.matches = matches
	if sp.behavior == splitIsolated && !sp.invert {
		prev := 0
		for _, m := range matches {
			if m[0] > prev {
				dst = append(dst, piece{p.text[prev:m[0]], p.atStart && prev == 0})
			}
			dst = append(dst, piece{p.text[m[0]:m[1]], p.atStart && m[0] == 0})
			prev = m[1]
		}
		if prev < len(p.text) {
			dst = append(dst, piece{p.text[prev:], p.atStart && prev == 0})
		}
		return dst
	}
	return splitByBehavior(dst, p, matches, sp.behavior, sp.invert)
}

// splitByBehavior follows tokenizers' NormalizedString::split.
func splitByBehavior(dst []piece, p piece, matches [][2]int, behavior splitBehavior, invert bool) []piece {
	type seg struct {
		start, end int
		match      bool
	}
	var segs []seg
	prev := 0
	for _, m := range matches {
		if m[0] > prev {
			segs = append(segs, seg{prev, m[0], invert})
		}
		segs = append(segs, seg{m[0], m[1], !invert})
		prev = m[1]
	}
	if prev < len(p.text) {
		segs = append(segs, seg{prev, len(p.text), invert})
	}
	var out []seg
	switch behavior {
	case splitRemoved:
		for _, s := range segs {
			if !s.match {
				out = append(out, s)
			}
		}
	case splitIsolated:
		out = segs
	case splitMergedWithPrevious:
		prevMatch := false
		for _, s := range segs {
			if s.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
	case splitMergedWithNext:
		prevMatch := false
		for i := len(segs) - 1; i >= 0; i-- {
			s := segs[i]
			if s.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = s.start
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case splitContiguous:
		prevMatch := false
		for _, s := range segs {
			if s.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
	}
	for _, s := range out {
		dst = append(dst, piece{p.text[s.start:s.end], p.atStart && s.start == 0})
	}
	return dst
}

// byteLevelPre is the ByteLevel pre-tokenizer. Its byte-to-rune mapping is
// implicit: the byte-level BPE model works on raw bytes. Only its optional
// prefix space and GPT-2 split remain; without them it is left out.
type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
}

func (b byteLevelPre) split(dst []piece, p piece, sc *scratch) []piece {
	if b.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	if !b.useRegex {
		return append(dst, p)
	}
	return splitPre{m: gpt2Matcher{}, behavior: splitIsolated}.split(dst, p, sc)
}

// prependScheme says where Metaspace adds its replacement character.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst                // only to text at offset 0 of the input
	prependNever
)

// metaspacePre is the Metaspace pre-tokenizer: spaces become the
// replacement ("▁"), which is prepended per the scheme and, with split, each
// replacement starts a new piece.
type metaspacePre struct {
	repl      string
	scheme    prependScheme
	splitRepl bool
}

func (ms metaspacePre) split(dst []piece, p piece, sc *scratch) []piece {
	s := strings.ReplaceAll(p.text, " ", ms.repl)
	if (ms.scheme == prependAlways || (ms.scheme == prependFirst && p.atStart)) && !strings.HasPrefix(s, ms.repl) {
		s = ms.repl + s
	}
	p.text = s
	if !ms.splitRepl {
		return append(dst, p)
	}
	sc.matches = stringMatcher{ms.repl}.appendMatches(sc.matches[:0], s)
	return splitByBehavior(dst, p, sc.matches, splitMergedWithNext, false)
}
