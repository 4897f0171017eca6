package structured

// tag is a Tagged format's delimiters: free text around spans that open
// with open, hold one JSON value, and end with close.
type tag struct {
	open, close string
	fail        []int // open's failure function: after matching i bytes and a mismatch, how many still match
	// only: the text between spans is whitespace alone (runs of at most
	// two bytes), there is at least one span, and at most maxSpans (0: no
	// bound).
	only     bool
	maxSpans int
}

func newTag(open, close string) *tag {
	t := &tag{open: open, close: close, fail: make([]int, len(open)+1)}
	for i, k := 1, 0; i < len(open); i++ { // Knuth–Morris–Pratt
		for k > 0 && open[i] != open[k] {
			k = t.fail[k]
		}
		if open[i] == open[k] {
			k++
		}
		t.fail[i+1] = k
	}
	return t
}

// advance is how many bytes of the opening tag end the text after byte
// b, when k of them ended it before (Knuth–Morris–Pratt).
func (t *tag) advance(k int, b byte) int {
	for k > 0 && t.open[k] != b {
		k = t.fail[k]
	}
	if t.open[k] == b {
		k++
	}
	return k
}

// Where a Tagged format's text is.
const (
	tFree    uint8 = iota // free text; tpos bytes of the opening tag matched at its end
	tInner                // the JSON value (jsonState's own modes)
	tClosing              // after the value: tpos bytes of the closing tag matched
)

// tagByte reads one byte of free text or of the closing tag.
func (s *jsonState) tagByte(b byte) bool {
	t := s.tag
	if s.tmode == tClosing {
		if t.close[s.tpos] != b {
			return false
		}
		if s.tpos++; s.tpos == len(t.close) {
			s.tmode, s.tpos, s.ws = tFree, 0, 0
			s.spans++
		}
		return true
	}
	if t.only { // whitespace, or the opening tag byte by byte
		switch {
		case s.tpos == 0 && isWS(b):
			s.ws++
			return s.ws <= 2
		case t.open[s.tpos] != b || t.maxSpans > 0 && s.spans == t.maxSpans:
			return false
		}
		if s.tpos++; s.tpos < len(t.open) {
			return true
		}
		s.open()
		return true
	}
	k := t.advance(s.tpos, b)
	if k < len(t.open) {
		s.tpos = k
		return true
	}
	s.open()
	return true
}

// open starts the value after a whole opening tag.
func (s *jsonState) open() {
	*s = jsonState{tag: s.tag, tmode: tInner, mode: mTop, val: s.root, root: s.root, compact: s.compact, spans: s.spans}
}
