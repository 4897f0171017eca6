package structured

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// thinkPieces: a vocabulary where the end marker comes whole, split, and
// inside longer tokens.
var thinkPieces = append(slices.Clone(testPieces), "</think>", "</", "think", ">", "<", "th", "ink>", "</think>\n\n", "</think>{", "</think>x", "\n\n", "hmm", " so")

// byHandThink is the tokens a gated matcher allows, each checked on its
// own through a copy of the gate and the format.
func byHandThink(m *Matcher) []int {
	var ids []int
	for id, p := range m.v.bytes {
		if p != nil && (m.think == nil && m.accepts(p) || m.think != nil && m.thinkAccepts(p)) {
			ids = append(ids, id)
		}
	}
	if m.Complete() || len(ids) == 0 {
		ids = append(ids, 1)
		slices.Sort(ids)
	}
	return ids
}

// TestAfterThinkingWalks: random generations under a gated JSON format
// think freely (the end token allowed), close the thinking, and then
// write one JSON object; the mask equals the per-token check at every
// step.
func TestAfterThinkingWalks(t *testing.T) {
	v := NewVocab(thinkPieces, func(id int) bool { return id < 2 }, []int{1})
	f := JSONObject().AfterThinking("</think>")
	if !f.ThinksFirst() || JSONObject().ThinksFirst() {
		t.Fatal("ThinksFirst")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	closing := []string{"</think>\n\n", "</s>", `"`, "}", "]", ":", ",", "0"} // close the thinking, then the end or what closes the JSON
	ended := 0
	for walk := range 300 {
		m := v.Matcher(f)
		var text strings.Builder
		for step := 0; ; step++ {
			if step > 3000 {
				t.Fatalf("walk %d did not end: %q", walk, text.String())
			}
			ids := allowedByMask(m, len(thinkPieces))
			if want := byHandThink(m); !slices.Equal(ids, want) {
				t.Fatalf("after %q: mask %v, by hand %v", text.String(), ids, want)
			}
			tok := ids[rng.IntN(len(ids))]
			if step > 30 {
				for _, c := range closing {
					if i := slices.Index(thinkPieces, c); slices.Contains(ids, i) {
						tok = i
						break
					}
				}
			}
			if tok == 1 {
				break
			}
			m.Accept(tok)
			text.WriteString(thinkPieces[tok])
		}
		s := text.String()
		i := strings.Index(s, "</think>")
		if i < 0 {
			continue // the thinking ended the text: allowed, as in vLLM
		}
		ended++
		answer := s[i+len("</think>"):]
		gap := len(answer) - len(strings.TrimLeft(answer, " \t\r\n"))
		var obj map[string]any
		dec := json.NewDecoder(strings.NewReader(answer))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil || dec.More() {
			t.Fatalf("walk %d: %q after the thinking is not one object (gap %d): %v", walk, answer, gap, err)
		}
	}
	if ended < 100 {
		t.Fatalf("only %d of 300 walks closed their thinking", ended)
	}
}

// TestAfterThinkingRaw: under a raw format the gate takes at most two
// whitespace bytes after the marker, the end token only while thinking
// and once the format is complete, and a marker split over tokens.
func TestAfterThinkingRaw(t *testing.T) {
	pieces := []string{"<s>", "</s>", "</think>", "</", "think>", "\n", "5", "x", "</think>\n\n5"}
	v := NewVocab(pieces, func(id int) bool { return id < 2 }, []int{1})
	f, err := Regex(`[0-9]+`)
	if err != nil {
		t.Fatal(err)
	}
	f = f.AfterThinking("</think>")
	run := func(toks ...int) *Matcher {
		m := v.Matcher(f)
		for _, tok := range toks {
			m.Accept(tok)
		}
		return m
	}
	for _, c := range []struct {
		toks []int
		want []int
	}{
		{nil, []int{1, 2, 3, 4, 5, 6, 7, 8}},               // thinking: all, the end token too
		{[]int{3}, []int{1, 2, 3, 4, 5, 6, 7, 8}},          // "</": "think>" closes it
		{[]int{2}, []int{5, 6}},                            // closed: whitespace or a digit
		{[]int{3, 4, 5, 5}, []int{6}},                      // two newlines spent: a digit
		{[]int{8}, []int{1, 6}},                            // "</think>\n\n5": the end, or more digits
		{[]int{7, 2, 6, 6}, []int{1, 6}},                   // thought "x", then "55"
		{[]int{2, 7}, []int{5, 6}},                         // "x" refused after the marker: still at the gap
		{[]int{6, 3, 7, 4}, []int{1, 2, 3, 4, 5, 6, 7, 8}}, // "</x" broke the marker; "think>" alone does not close it
	} {
		if got := allowedByMask(run(c.toks...), len(pieces)); !slices.Equal(got, c.want) {
			t.Errorf("after %v: allowed %v, want %v", c.toks, got, c.want)
		}
	}
}
