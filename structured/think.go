package structured

// A reasoning model thinks before it answers (<think> … </think>), and an
// output format holds its answer, not its thinking, as vLLM applies
// structured output once reasoning has ended. A thinking gate leaves the
// text free until the end marker, then up to maxThinkGap whitespace bytes
// (the blank line models write after </think>), then holds the rest to
// the format. Only tokens that can complete the marker are checked while
// the gate is shut (Matcher.watchMask).

// maxThinkGap is the whitespace after the end marker that is not the
// format's.
const maxThinkGap = 2

// thinkGate is a Matcher's gate: the marker's KMP table (a tag with the
// marker as its opening), the bytes of it matched at the text's end, and
// the whitespace read after it.
type thinkGate struct {
	end *tag
	pos int
	gap int
}

// AfterThinking is f held only after the end marker of a reasoning
// model's thinking (for example "</think>"): the text is free until then,
// the end tokens allowed, as vLLM leaves a reasoning model's thinking
// unconstrained.
func (f *Format) AfterThinking(end string) *Format {
	c := *f
	c.think = end
	return &c
}

// ThinksFirst reports whether f leaves a reasoning model's thinking free
// (AfterThinking).
func (f *Format) ThinksFirst() bool { return f.think != "" }

// thinking reports whether the marker is not yet whole: the text may end.
func (g *thinkGate) thinking() bool { return g.pos < len(g.end.open) }

// step reads byte b: open reports that it is past the gate (b is the
// format's first byte; the gate is spent).
func (g *thinkGate) step(b byte) (open bool) {
	t := g.end
	if g.pos == len(t.open) {
		if isWS(b) && g.gap < maxThinkGap {
			g.gap++
			return false
		}
		return true
	}
	g.pos = t.advance(g.pos, b)
	return false
}

// thinkAccepts reports whether the gate and then the format take p.
func (m *Matcher) thinkAccepts(p []byte) bool {
	g := *m.think
	for i, b := range p {
		if g.step(b) {
			return m.accepts(p[i:])
		}
	}
	return true
}

// thinkMask is Mask's allowed tokens while the gate is shut: free text
// watched for the marker, and once it is whole, in the whitespace after
// it, every token checked through the gate and the format.
func (m *Matcher) thinkMask() {
	g := m.think
	if g.thinking() {
		m.watchMask(g.end, g.pos, m.thinkAccepts)
		return
	}
	for id, p := range m.v.bytes {
		m.allowed[id] = p != nil && m.thinkAccepts(p)
	}
}

// thinkAccept follows p through the gate, and what is past it through
// the format; a token the format refuses past the gate changes nothing.
func (m *Matcher) thinkAccept(p []byte) {
	if !m.thinkAccepts(p) {
		return
	}
	g := m.think
	for i, b := range p {
		if g.step(b) {
			m.think = nil
			m.acceptBytes(p[i:])
			return
		}
	}
}
