package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gearboxlm/gearbox/internal/tagtext"
)

// Delta is what a piece of output adds to the message: content text and
// calls, each call's first delta carrying its name and its arguments
// coming whole or in pieces (a named function's stream as generated).
type Delta struct {
	Content string
	Calls   []CallDelta
}

// CallDelta is a piece of one call: Index counts the message's calls from
// 0; Name is set on a call's first piece only.
type CallDelta struct {
	Index     int
	Name      string
	Arguments string
}

// Hermes' tags and Llama 3's marker.
const (
	openTag     = "<tool_call>"
	closeTag    = "</tool_call>"
	pythonTag   = "<|python_tag|>"
	mistralTag  = "[TOOL_CALLS]"
	mistralArgs = "[ARGS]"
)

// Reader splits one generation's text, as it streams, into content and
// calls. Write takes each new piece of text and Close the end; the
// deltas they return, concatenated, are the whole message. Where calls
// may come, whitespace next to them is not content: a run of it is held
// until text follows, and dropped at the end of a message that made
// calls. A Reader is not safe for concurrent use.
type Reader struct {
	choice Choice
	syntax Syntax
	names  []string

	buf    strings.Builder // text not yet given out
	inCall bool            // Hermes: inside <tool_call>; Mistral: past [TOOL_CALLS]
	space  string          // whitespace held back from the content
	calls  int             // calls given out
	// Llama3JSON: the message's first text decides: a call (buffered to
	// the end) or content.
	decided, bare bool
	// Required: the array read so far: nesting depth, string state, and
	// where the next call object starts.
	depth          int
	inStr, escaped bool
	start, scanned int
}

// NewReader returns a Reader of a generation made under choice; syntax is
// the model's (used under Auto) and tools the functions offered.
func NewReader(choice Choice, syntax Syntax, tools []Function) *Reader {
	r := &Reader{choice: choice, syntax: syntax, start: -1}
	for _, f := range tools {
		r.names = append(r.names, f.Name)
	}
	return r
}

// Write reads the next piece of the generation's text.
func (r *Reader) Write(text string) Delta {
	var d Delta
	switch {
	case r.choice.Mode == Named:
		if text == "" {
			return d
		}
		c := CallDelta{Arguments: text}
		if r.calls == 0 {
			c.Name, r.calls = r.choice.Name, 1
		}
		d.Calls = append(d.Calls, c)
	case r.choice.Mode == Required && r.syntax != Hermes:
		r.buf.WriteString(text)
		r.scanArray(&d)
	case r.choice.Mode != None && r.syntax == Hermes: // auto, and required in the model's own syntax
		r.buf.WriteString(text)
		r.hermes(&d, false)
	case r.choice.Mode == Auto && (r.syntax == Llama3JSON || r.syntax == Pythonic):
		r.buf.WriteString(text)
		r.whole(&d, false)
	case r.choice.Mode == Auto && r.syntax == Mistral:
		r.buf.WriteString(text)
		r.mistral(&d, false)
	default: // no calls: the text is content as it comes
		d.Content = text
	}
	return d
}

// Close reads the end of the generation: what is held back is given out,
// as calls where it parses as them and as content otherwise.
func (r *Reader) Close() Delta {
	var d Delta
	switch {
	case r.choice.Mode == Named:
		if r.calls == 0 { // nothing generated: the call, with no arguments
			d.Calls = append(d.Calls, CallDelta{Name: r.choice.Name})
			r.calls = 1
		}
		return d
	case r.choice.Mode == Required && r.syntax != Hermes:
		if r.start >= 0 { // a call cut short (the length limit): content
			r.content(&d, r.buf.String()[r.start:])
		}
	case r.choice.Mode != None && r.syntax == Hermes:
		r.hermes(&d, true)
	case r.choice.Mode == Auto && (r.syntax == Llama3JSON || r.syntax == Pythonic):
		r.whole(&d, true)
	case r.choice.Mode == Auto && r.syntax == Mistral:
		r.mistral(&d, true)
	}
	if r.calls == 0 && r.space != "" {
		d.Content += r.space
	}
	r.space = ""
	return d
}

// content gives out text as content, holding back trailing whitespace.
func (r *Reader) content(d *Delta, text string) {
	body := strings.TrimRightFunc(text, tagtext.IsSpace)
	if body != "" {
		d.Content += r.space + body
		r.space = ""
	}
	r.space += text[len(body):]
}

// addCall gives out a whole call.
func (r *Reader) addCall(d *Delta, c call) {
	d.Calls = append(d.Calls, CallDelta{Index: r.calls, Name: c.name, Arguments: c.args})
	r.calls++
	r.space = "" // whitespace before a call is not content
}

// callsOr gives out calls, or text as content when there are none (the
// message was not all calls).
func (r *Reader) callsOr(d *Delta, calls []call, text string) {
	if calls == nil {
		r.content(d, text)
		return
	}
	for _, c := range calls {
		r.addCall(d, c)
	}
}

// contentUntil gives out text up to tag as content and returns the tag's
// index. Without the tag it gives out all but a tail that may begin it
// (nothing is held at the end), buffers that tail, and returns -1.
func (r *Reader) contentUntil(d *Delta, text, tag string, end bool) int {
	if i := strings.Index(text, tag); i >= 0 {
		r.content(d, text[:i])
		return i
	}
	keep := 0
	if !end {
		keep = tagtext.PartialSuffix(text, tag)
	}
	r.buf.Reset()
	r.buf.WriteString(text[len(text)-keep:])
	r.content(d, text[:len(text)-keep])
	return -1
}

// hermes reads what is buffered: content up to a <tool_call>, each call
// once its </tool_call> arrives (or at the end, unclosed), and holds back
// a tail that may be the start of a tag.
func (r *Reader) hermes(d *Delta, end bool) {
	text := r.buf.String()
	r.buf.Reset()
	for {
		if !r.inCall {
			i := r.contentUntil(d, text, openTag, end)
			if i < 0 {
				return
			}
			r.inCall, text = true, text[i+len(openTag):]
			continue
		}
		i := strings.Index(text, closeTag)
		if i < 0 {
			if end && text != "" {
				if c, ok := parseCall(strings.TrimSpace(text), r.names); ok {
					r.addCall(d, c)
				} else {
					r.content(d, openTag+text)
				}
			} else {
				r.buf.WriteString(text)
			}
			return
		}
		if c, ok := parseCall(strings.TrimSpace(text[:i]), r.names); ok {
			r.addCall(d, c)
		} else {
			r.content(d, openTag+text[:i+len(closeTag)])
		}
		r.inCall, text = false, text[i+len(closeTag):]
	}
}

// whole reads the syntaxes in which calls are the whole message: a
// message that opens as calls do (Llama 3: <|python_tag|> or "{";
// pythonic: "[" or <|python_start|>) is buffered to the end and read as
// calls (all of them, or the whole text is content); any other message is
// content as it comes.
func (r *Reader) whole(d *Delta, end bool) {
	text := r.buf.String()
	if !r.decided {
		lead := strings.TrimLeftFunc(text, tagtext.IsSpace)
		tag, open := pythonTag, "{"
		if r.syntax == Pythonic {
			tag, open = pythonStart, "["
		}
		if !end && (lead == "" || strings.HasPrefix(tag, lead)) {
			return // not yet known
		}
		r.decided = true
		r.bare = !strings.HasPrefix(lead, open) && !strings.HasPrefix(lead, tag)
	}
	if r.bare {
		r.buf.Reset()
		r.content(d, text)
		return
	}
	if !end {
		return
	}
	r.buf.Reset()
	var calls []call
	if r.syntax == Pythonic {
		if cs, ok := parsePythonic(text, r.names); ok {
			calls = cs
		}
	} else {
		calls = llama3Calls(text, r.names)
	}
	r.callsOr(d, calls, text)
}

// llama3Calls reads a Llama 3 message as calls separated by ";", or
// returns nil unless all of it is calls of names.
func llama3Calls(text string, names []string) []call {
	body := strings.TrimPrefix(strings.TrimSpace(text), pythonTag)
	var calls []call
	dec := json.NewDecoder(strings.NewReader(body))
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		c, ok := parseCall(string(raw), names)
		if !ok {
			calls = nil
			break
		}
		calls = append(calls, c)
		rest := strings.TrimSpace(body[dec.InputOffset():])
		if rest == "" {
			break
		}
		if !strings.HasPrefix(rest, ";") {
			calls = nil
			break
		}
		body = strings.TrimPrefix(rest, ";")
		dec = json.NewDecoder(strings.NewReader(body))
	}
	return calls
}

// mistral reads Mistral's syntax: content up to [TOOL_CALLS] (a tail that
// may begin it held back), then everything after it, buffered to the end
// and read as calls, or as content when it is not all calls.
func (r *Reader) mistral(d *Delta, end bool) {
	text := r.buf.String()
	if !r.inCall {
		i := r.contentUntil(d, text, mistralTag, end)
		if i < 0 {
			return
		}
		r.inCall = true
		r.buf.Reset()
		r.buf.WriteString(text[i:])
		text = r.buf.String()
	}
	if !end {
		return
	}
	r.buf.Reset()
	var calls []call
	for _, seg := range strings.Split(text, mistralTag)[1:] {
		seg = strings.TrimSpace(seg)
		if name, args, ok := strings.Cut(seg, mistralArgs); ok { // name[ARGS]{...}
			c, ok := parseCall(fmt.Sprintf(`{"name": %q, "arguments": %s}`, strings.TrimSpace(name), args), r.names)
			if !ok {
				calls = nil
				break
			}
			calls = append(calls, c)
			continue
		}
		var list []json.RawMessage // [{"name", "arguments"}, ...]
		if json.Unmarshal([]byte(seg), &list) != nil || len(list) == 0 {
			calls = nil
			break
		}
		for _, raw := range list {
			c, ok := parseCall(string(raw), r.names)
			if !ok {
				calls = nil
				break
			}
			calls = append(calls, c)
		}
		if calls == nil {
			break
		}
	}
	r.callsOr(d, calls, text)
}

// scanArray reads the array of calls a Required generation writes,
// giving out each call once its object closes. The format guarantees the
// JSON; the scan only tracks strings and nesting to find the objects.
func (r *Reader) scanArray(d *Delta) {
	text := r.buf.String()
	for i := r.scanned; i < len(text); i++ {
		b := text[i]
		if r.inStr {
			switch {
			case r.escaped:
				r.escaped = false
			case b == '\\':
				r.escaped = true
			case b == '"':
				r.inStr = false
			}
			continue
		}
		switch b {
		case '"':
			r.inStr = true
		case '[', '{':
			if r.depth == 1 && b == '{' {
				r.start = i
			}
			r.depth++
		case ']', '}':
			r.depth--
			if r.depth == 1 && b == '}' && r.start >= 0 {
				if c, ok := parseCall(text[r.start:i+1], r.names); ok {
					r.addCall(d, c)
				} else {
					r.content(d, text[r.start:i+1])
				}
				r.start = -1
			}
		}
	}
	r.scanned = len(text)
}
