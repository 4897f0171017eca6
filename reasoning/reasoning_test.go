package reasoning

import (
	"testing"
)

// read feeds text to a fresh Reader in the given pieces and joins the
// deltas.
func read(p Parser, prompt string, pieces []string) Delta {
	r := NewReader(p, prompt)
	var out Delta
	add := func(d Delta) {
		out.Reasoning += d.Reasoning
		out.Content += d.Content
	}
	for _, s := range pieces {
		add(r.Write(s))
	}
	add(r.Close())
	return out
}

// TestReader reads each output whole, then split at every pair of
// places: the result must not depend on how the text streams in.
func TestReader(t *testing.T) {
	const (
		plain    = "<|im_start|>assistant\n"
		opened   = "<|im_start|>assistant\n<think>\n"               // DeepSeek-R1's and Qwen3.5's templates
		disabled = "<|im_start|>assistant\n<think>\n\n</think>\n\n" // Qwen3, enable_thinking false
	)
	for _, c := range []struct {
		parser             Parser
		prompt, text       string
		reasoning, content string
	}{
		{Qwen3, plain, "<think>\nLet me see. 2+2 is 4.\n</think>\n\nIt is 4.", "Let me see. 2+2 is 4.", "It is 4."},
		{Qwen3, plain, "  <think>a < b, so </thin k> no</think>yes", "a < b, so </thin k> no", "yes"},
		{Qwen3, plain, "No thinking here.\n", "", "No thinking here.\n"},
		{Qwen3, plain, "<thin", "", "<thin"},
		{Qwen3, plain, "<think>\ncut short by the length\n", "cut short by the length", ""},
		{Qwen3, plain, "<think></think>answer <think> kept", "", "answer <think> kept"},
		{Qwen3, opened, "weighing it\n\n</think>\n\nDone.", "weighing it", "Done."},
		{Qwen3, opened, "<think>\nthe model opens it again</think>ok", "the model opens it again", "ok"},
		{Qwen3, disabled, "Straight to it.", "", "Straight to it."},
		{Qwen3, disabled, "<think>x</think>y", "", "<think>x</think>y"},
		{DeepSeekR1, plain, "no tag, still thinking</think>\nanswer", "no tag, still thinking", "answer"},
		{DeepSeekR1, plain, "<think>tagged</think>answer", "tagged", "answer"},
		{DeepSeekR1, plain, "never closed", "never closed", ""},
		{DeepSeekR1, disabled, "answer only", "", "answer only"},
	} {
		want := Delta{Reasoning: c.reasoning, Content: c.content}
		if got := read(c.parser, c.prompt, []string{c.text}); got != want {
			t.Errorf("%s %q %q:\n\tgot  %+v\n\twant %+v", c.parser, c.prompt, c.text, got, want)
			continue
		}
		for i := 0; i <= len(c.text); i++ {
			for j := i; j <= len(c.text); j++ {
				pieces := []string{c.text[:i], c.text[i:j], c.text[j:]}
				if got := read(c.parser, c.prompt, pieces); got != want {
					t.Fatalf("%s %q %q:\n\tgot  %+v\n\twant %+v", c.parser, c.prompt, pieces, got, want)
				}
			}
		}
	}
}

func TestParseParser(t *testing.T) {
	for _, name := range []string{"qwen3", "deepseek_r1"} {
		if p, err := ParseParser(name); err != nil || string(p) != name {
			t.Errorf("ParseParser(%q) = %q, %v", name, p, err)
		}
	}
	if _, err := ParseParser("granite"); err == nil {
		t.Error("ParseParser(granite): no error")
	}
}

// FuzzReader: any text after any prompt, split anywhere, reads without a
// panic into what it reads whole.
func FuzzReader(f *testing.F) {
	f.Add("<|im_start|>assistant\n", "<think>\nhm</think>\n\nok", uint(4), false)
	f.Add("x<think>\n", " a </thin", uint(2), true)
	f.Fuzz(func(t *testing.T, prompt, text string, at uint, r1 bool) {
		p := Qwen3
		if r1 {
			p = DeepSeekR1
		}
		i := int(at % uint(len(text)+1))
		if whole, split := read(p, prompt, []string{text}), read(p, prompt, []string{text[:i], text[i:]}); whole != split {
			t.Fatalf("%q after %q split at %d: %+v, whole %+v", text, prompt, i, split, whole)
		}
	})
}

// TestThinksFirst: only a prompt that closes the thinking leaves none.
func TestThinksFirst(t *testing.T) {
	for prompt, want := range map[string]bool{
		"<|im_start|>assistant\n":                        true, // Qwen3: the model may open it
		"<|Assistant|><think>\n":                         true,
		"<|im_start|>assistant\n<think>\n\n</think>\n\n": false, // enable_thinking false
		"": true,
	} {
		if got := ThinksFirst(prompt); got != want {
			t.Errorf("%q: %v, want %v", prompt, got, want)
		}
	}
}
