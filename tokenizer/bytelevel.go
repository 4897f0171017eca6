package tokenizer

// GPT-2's byte-level alphabet: every byte is shown as a printable rune so
// that byte-level vocabularies can be stored as text. Printable Latin-1
// bytes stand for themselves; the others (controls, space, 0x7F-0xA0, 0xAD)
// are shifted to U+0100 and up, in byte order ("Ġ" is the space, "Ċ" the
// newline).
var (
	byteToRune [256]rune
	runeToByte [324]int16 // by rune: its byte, or -1 (the alphabet ends at U+0143)
)

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = int16(b)
	}
}

// byteLevelToBytes maps a byte-level token ("Ġhello") back to the bytes it
// stands for (" hello"). ok is false when the token holds a rune outside the
// byte-level alphabet.
func byteLevelToBytes(tok string) (b []byte, ok bool) {
	b = make([]byte, 0, len(tok))
	for _, r := range tok {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return nil, false
		}
		b = append(b, byte(runeToByte[r]))
	}
	return b, true
}
