package tokenizer

import "unicode/utf8"

// The decoders turn byte sequences into text the way the WHATWG Encoding
// standard, JavaScript's TextDecoder and Rust's String::from_utf8_lossy do:
// every maximal subpart of an ill-formed sequence becomes one U+FFFD. This
// rule is local (what a byte decodes to never depends on bytes more than one
// sequence away), which is what lets Decoder stream exactly.

// utf8Seq reports how many bytes the sequence started by lead byte c has,
// and the allowed range of its second byte; n is 0 for a byte that cannot
// start a sequence.
func utf8Seq(c byte) (n int, lo, hi byte) {
	switch {
	case c < 0x80:
		return 1, 0, 0
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

// appendLossy appends b to dst as UTF-8, each maximal ill-formed subpart
// replaced by U+FFFD.
func appendLossy(dst []byte, b []byte) []byte {
	if utf8.Valid(b) {
		return append(dst, b...)
	}
	for i := 0; i < len(b); {
		c := b[i]
		if c < 0x80 {
			dst = append(dst, c)
			i++
			continue
		}
		n, lo, hi := utf8Seq(c)
		if n == 0 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
			i++
			continue
		}
		j := i + 1
		for k := 1; k < n && j < len(b); k++ {
			if b[j] < lo || b[j] > hi {
				break
			}
			lo, hi = 0x80, 0xBF
			j++
		}
		if j-i == n {
			dst = append(dst, b[i:j]...)
		} else {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		}
		i = j
	}
	return dst
}

// incompleteTail returns the length of the trailing bytes of b that are a
// proper prefix of a well-formed UTF-8 sequence: bytes whose decoding
// depends on what comes next. It is 0 when b ends on a sequence boundary or
// with bytes that are ill-formed whatever follows.
func incompleteTail(b []byte) int {
	for k := len(b) - 1; k >= 0 && k >= len(b)-3; k-- {
		c := b[k]
		if c < 0x80 {
			return 0
		}
		if c < 0xC0 {
			continue // continuation byte: look further back for the lead
		}
		n, lo, hi := utf8Seq(c)
		tail := len(b) - k
		if n == 0 || tail >= n {
			return 0
		}
		for j := k + 1; j < len(b); j++ {
			if b[j] < lo || b[j] > hi {
				return 0
			}
			lo, hi = 0x80, 0xBF
		}
		return tail
	}
	return 0
}
