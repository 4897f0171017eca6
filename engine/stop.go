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
	include bool // the text ends after the stop string found, not before it
}

func newStopMatcher(stops []string, include bool) *stopMatcher {
	m := &stopMatcher{include: include}
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
// a stop string was found (the emitted text then ends just before it, or
// just after it with include). With check false stop strings are not
// looked for (min_tokens not reached yet): the text passes, less what
// may begin one.
func (m *stopMatcher) Push(text string, check bool) (emit string, stopped bool) {
	m.pending += text
	if len(m.stops) == 0 {
		emit, m.pending = m.pending, ""
		return emit, false
	}
	first, end := -1, 0
	for _, s := range m.stops {
		if !check {
			break
		}
		if i := strings.Index(m.pending, s); i >= 0 && (first < 0 || i < first || i == first && i+len(s) > end) {
			first, end = i, i+len(s)
		}
	}
	if first >= 0 {
		if !m.include {
			end = first
		}
		emit, m.pending = m.pending[:end], ""
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
