package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// decoding is the compiled tokenizer.json "decoder". The decoders in use
// reduce to: each token becomes a fixed byte string (its piece); the pieces
// are concatenated and read as UTF-8 (ill-formed parts become U+FFFD, see
// utf8.go); and up to stripN leading strip runes are removed from the
// result (a Strip decoder after Fuse). Metaspace decoders treat the first
// token differently, hence firstPieces.
type decoding struct {
	pieces      []string // by id; may hold partial UTF-8 (byte-level and <0xNN> tokens)
	firstPieces []string // by id, for the first token decoded; nil when the same as pieces
	strip       rune
	stripN      int
}

// Decode returns the text of ids. With skipSpecial, special tokens are
// left out (see IsSpecial). Ids outside the vocabulary are ignored. Byte
// sequences that are not valid UTF-8 become U+FFFD. Clean-up of spaces
// before punctuation (transformers' clean_up_tokenization_spaces) is not
// applied.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	var buf []byte
	first := true
	for _, id := range ids {
		p, ok := t.piece(id, first, skipSpecial)
		if !ok {
			continue
		}
		first = false
		buf = append(buf, p...)
	}
	s := string(appendLossy(nil, buf))
	for i := 0; i < t.dec.stripN && s != ""; i++ {
		r, n := utf8.DecodeRuneInString(s)
		if r != t.dec.strip {
			break
		}
		s = s[n:]
	}
	return s
}

// Piece returns the bytes id adds to a text when it follows another token
// (a string that may hold part of a UTF-8 character), special tokens
// included; "" for an id outside the vocabulary. Structured output masks
// the vocabulary by these bytes.
func (t *Tokenizer) Piece(id int) string {
	p, _ := t.piece(id, false, false)
	return p
}

// piece returns the bytes id decodes to; ok is false for ids that decode to
// nothing (out of range, or special when skipping them).
func (t *Tokenizer) piece(id int, first, skipSpecial bool) (p string, ok bool) {
	if id < 0 || id >= len(t.dec.pieces) || (skipSpecial && t.special[id]) {
		return "", false
	}
	if first && t.dec.firstPieces != nil {
		return t.dec.firstPieces[id], true
	}
	return t.dec.pieces[id], true
}

// Decoder turns a stream of generated token ids into text as it arrives.
// The text it returns, concatenated (Add results, then Flush), is exactly
// Decode(prompt+generated) less Decode(prompt), whenever the prompt decodes
// to whole characters; and it never returns part of a UTF-8 character: bytes
// of an unfinished character wait for the token that completes them.
//
// It keeps no window of tokens: since decoding is per-token pieces read as
// UTF-8 plus a leading strip, its state is the unfinished character's bytes,
// whether a token has been decoded yet (so a generated "▁word" keeps its
// space after a prompt), and how much leading strip is left.
//
// A Decoder is not safe for concurrent use; use one per stream.
type Decoder struct {
	t         *Tokenizer
	skip      bool
	started   bool   // some token has been decoded
	stripLeft int    // leading strip runes that may still be removed
	pending   []byte // trailing bytes of an unfinished UTF-8 character
	buf       []byte
}

// NewDecoder returns a Decoder for text generated after prompt (the prompt
// ids as given to the model, BOS included). skipSpecial is as for Decode.
func (t *Tokenizer) NewDecoder(prompt []int, skipSpecial bool) *Decoder {
	d := &Decoder{t: t, skip: skipSpecial, stripLeft: t.dec.stripN}
	for _, id := range prompt {
		d.Add(id)
	}
	return d
}

// Add consumes one generated id and returns the text that became final.
func (d *Decoder) Add(id int) string {
	p, ok := d.t.piece(id, !d.started, d.skip)
	if !ok {
		return ""
	}
	d.started = true
	d.buf = append(append(d.buf[:0], d.pending...), p...)
	tail := incompleteTail(d.buf)
	d.pending = append(d.pending[:0], d.buf[len(d.buf)-tail:]...)
	return d.emit(d.buf[:len(d.buf)-tail])
}

// Flush returns what is left at the end of the stream: U+FFFD for an
// unfinished character, else "".
func (d *Decoder) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	s := d.emit(d.pending)
	d.pending = d.pending[:0]
	return s
}

func (d *Decoder) emit(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	s := string(appendLossy(nil, b))
	for d.stripLeft > 0 && s != "" {
		r, n := utf8.DecodeRuneInString(s)
		if r != d.t.dec.strip {
			d.stripLeft = 0
			break
		}
		s = s[n:]
		d.stripLeft--
	}
	return s
}

// decodeStep is one decoder of a tokenizer.json decoder Sequence.
type decodeStep struct {
	kind      string // "Replace", "ByteFallback", "ByteLevel", "Metaspace", "Strip"
	old, new  string // Replace; Metaspace: old is the replacement rune
	metaFirst bool   // Metaspace: the first token loses its replacement runes
	start     int    // Strip
	stop      int    // Strip
	content   rune   // Strip
}

// buildPieces computes the piece of every token by running the per-token
// decode steps on it. Added tokens skip the byte-level mapping: they decode
// to their content, as transformers does.
func buildPieces(tokens []string, added []bool, steps []decodeStep, first bool) []string {
	out := make([]string, len(tokens))
	for id, tok := range tokens {
		s, raw := tok, false // raw: s now holds bytes, not token text
		for _, st := range steps {
			switch st.kind {
			case "Replace":
				if !raw {
					s = strings.ReplaceAll(s, st.old, st.new)
				}
			case "ByteFallback":
				if b, ok := byteFallbackByte(s); ok && !raw {
					s, raw = string([]byte{b}), true
				}
			case "ByteLevel":
				if !raw && !added[id] {
					if b, ok := byteLevelToBytes(s); ok {
						s, raw = string(b), true
					}
				}
			case "Metaspace":
				if !raw {
					repl := " "
					if first && st.metaFirst {
						repl = ""
					}
					s = strings.ReplaceAll(s, st.old, repl)
				}
			case "Strip":
				if !raw {
					s = stripRunes(s, st.content, st.start, st.stop)
				}
			}
		}
		out[id] = s
	}
	return out
}

// byteFallbackByte parses a "<0xNN>" byte token.
func byteFallbackByte(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	var b byte
	for _, c := range []byte(s[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			b = b<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			b = b<<4 | (c - 'A' + 10)
		case c >= 'a' && c <= 'f':
			b = b<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return b, true
}

// stripRunes removes up to start leading and stop trailing copies of c.
func stripRunes(s string, c rune, start, stop int) string {
	for i := 0; i < start; i++ {
		r, n := utf8.DecodeRuneInString(s)
		if n == 0 || r != c {
			break
		}
		s = s[n:]
	}
	for i := 0; i < stop; i++ {
		r, n := utf8.DecodeLastRuneInString(s)
		if n == 0 || r != c {
			break
		}
		s = s[:len(s)-n]
	}
	return s
}
