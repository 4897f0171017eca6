// Package reasoning separates a reasoning model's thinking from its
// answer: the text inside <think> … </think>, which the chat API returns
// as message.reasoning (vLLM's --reasoning-parser), while content keeps
// the answer.
//
// Where the thinking starts depends on the chat template as much as on
// the model. Qwen3's model writes <think> itself; DeepSeek-R1's template
// (and Qwen3.5's) ends the prompt with <think>, so the output holds only
// the closing tag; with thinking switched off (Qwen3's enable_thinking
// false) the prompt ends with an empty <think></think> and the output is
// all answer. A Reader therefore starts from the prompt it continues.
package reasoning

import (
	"fmt"
	"strings"

	"github.com/gearboxlm/gearbox/internal/tagtext"
)

// Parser names how a model marks its thinking (vLLM's
// --reasoning-parser names). Both use <think> tags; they differ in what an
// output that does not open with <think> is.
type Parser string

const (
	// Qwen3: thinking only between the tags the model (or the prompt)
	// opens; an output that opens with anything else is all answer.
	Qwen3 Parser = "qwen3"
	// DeepSeekR1: the model thinks first, whether or not it writes
	// <think>: everything before </think> is thinking.
	DeepSeekR1 Parser = "deepseek_r1"
)

// Parsers are the parsers a Reader reads, by name.
var Parsers = []Parser{Qwen3, DeepSeekR1}

// ParseParser reads a --reasoning-parser name.
func ParseParser(name string) (Parser, error) {
	for _, p := range Parsers {
		if string(p) == name {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown reasoning parser %q (have %q)", name, Parsers)
}

const (
	openTag  = "<think>"
	closeTag = "</think>"
)

// End is the marker that ends a model's thinking.
const End = closeTag

// ThinksFirst reports whether the generation that continues prompt may
// think before it answers, under either parser: whether the prompt leaves
// the thinking open or undecided, rather than closed (a template's empty
// <think></think> with thinking switched off).
func ThinksFirst(prompt string) bool {
	return !strings.HasSuffix(strings.TrimRightFunc(prompt, tagtext.IsSpace), closeTag)
}

// Delta is what a piece of output adds: thinking and answer text.
type Delta struct {
	Reasoning, Content string
}

type mode uint8

const (
	mUndecided mode = iota // the output may yet open with <think>
	mThinking
	mAnswer
)

// Reader splits one generation's text, as it streams, into thinking and
// answer. Thinking is trimmed of the whitespace at its ends, and the
// answer of the whitespace the model puts after </think>; the answer is
// otherwise as written. A Reader is not safe for concurrent use.
type Reader struct {
	mode    mode
	buf     string // text not yet given out: a tag's possible start, whitespace held back
	thought bool   // some thinking was given out
	opened  bool   // the thinking's start is behind: the model's own <think> (if any) read
	lead    bool   // the answer has begun (its leading whitespace is behind)
}

// NewReader returns a Reader of the generation that continues prompt (the
// rendered chat prompt).
func NewReader(p Parser, prompt string) *Reader {
	r := &Reader{}
	tail := strings.TrimRightFunc(prompt, tagtext.IsSpace)
	switch {
	case strings.HasSuffix(tail, openTag):
		r.mode = mThinking
	case strings.HasSuffix(tail, closeTag):
		r.mode, r.lead = mAnswer, true
	case p == DeepSeekR1:
		r.mode = mThinking
	}
	return r
}

// Write reads the next piece of the generation's text.
func (r *Reader) Write(text string) Delta {
	r.buf += text
	return r.read(false)
}

// Close reads the end of the generation: an output cut inside its
// thinking is all thinking.
func (r *Reader) Close() Delta { return r.read(true) }

func (r *Reader) read(end bool) Delta {
	var d Delta
	for {
		switch r.mode {
		case mUndecided:
			lead := strings.TrimLeftFunc(r.buf, tagtext.IsSpace)
			if !end && (lead == "" || strings.HasPrefix(openTag, lead)) {
				return d // not yet known
			}
			if strings.HasPrefix(lead, openTag) {
				r.mode, r.buf = mThinking, lead
				continue
			}
			r.mode, r.lead = mAnswer, true
		case mThinking:
			if !r.opened { // the model's own <think>, also after a prompt's
				lead := strings.TrimLeftFunc(r.buf, tagtext.IsSpace)
				if !end && strings.HasPrefix(openTag, lead) {
					return d
				}
				r.buf, r.opened = strings.TrimLeftFunc(strings.TrimPrefix(lead, openTag), tagtext.IsSpace), true
			}
			if !r.thought { // leading whitespace, before any thinking is given out
				r.buf = strings.TrimLeftFunc(r.buf, tagtext.IsSpace)
			}
			if i := strings.Index(r.buf, closeTag); i >= 0 {
				d.Reasoning += strings.TrimRightFunc(r.buf[:i], tagtext.IsSpace)
				r.mode, r.buf = mAnswer, r.buf[i+len(closeTag):]
				continue
			}
			// Give out what cannot be the start of </think> or trailing
			// whitespace, which goes only if thinking goes on after it.
			keep := len(r.buf)
			if !end {
				keep = len(strings.TrimRightFunc(r.buf[:len(r.buf)-tagtext.PartialSuffix(r.buf, closeTag)], tagtext.IsSpace))
			}
			if keep > 0 {
				d.Reasoning += r.buf[:keep]
				r.buf, r.thought = r.buf[keep:], true
			}
			if end {
				d.Reasoning = strings.TrimRightFunc(d.Reasoning, tagtext.IsSpace)
			}
			return d
		case mAnswer:
			if !r.lead {
				r.buf = strings.TrimLeftFunc(r.buf, tagtext.IsSpace)
				if r.buf == "" {
					return d
				}
				r.lead = true
			}
			d.Content += r.buf
			r.buf = ""
			return d
		}
	}
}
