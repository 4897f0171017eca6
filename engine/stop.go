package engine

import (
	"strings"
	"unicode/utf8"
)

// stopMatcher finds stop strings in streamed text. It holds back the last
// len(longest stop)-1 bytes so that a stop string split across tokens is
// never partly emitted.
type stopMatcher struct {
	stops   []string
	hold    int
	pending string
}

func newStopMatcher(stops []string) *stopMatcher {
	m := &stopMatcher{}
	for _, s := range stops {
		if s == "" {
			continue
		}
		m.stops = append(m.stops, s)
		m.hold = max(m.hold, len(s)-1)
	}
	return m
}

// Push adds new text and returns the text that is safe to emit, and whether
// a stop string was found (the emitted text then ends just before it).
func (m *stopMatcher) Push(text string) (emit string, stopped bool) {
	m.pending += text
	if len(m.stops) == 0 {
		emit, m.pending = m.pending, ""
		return emit, false
	}
	first := -1
	for _, s := range m.stops {
		if i := strings.Index(m.pending, s); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		emit, m.pending = m.pending[:first], ""
		return emit, true
	}
	cut := len(m.pending) - m.hold
	for cut > 0 && cut < len(m.pending) && !utf8.RuneStart(m.pending[cut]) {
		cut--
	}
	if cut <= 0 {
		return "", false
	}
	emit, m.pending = m.pending[:cut], m.pending[cut:]
	return emit, false
}

// Flush returns the held-back text at the end of a stream.
func (m *stopMatcher) Flush() string {
	s := m.pending
	m.pending = ""
	return s
}
