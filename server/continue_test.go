package server

import (
	"encoding/json"
	"testing"
)

// TestContinueFinalMessage holds the cut to transformers'
// apply_chat_template(continue_final_message=True).
func TestContinueFinalMessage(t *testing.T) {
	for _, c := range []struct{ rendered, final, want string }{
		{"<a>hi <e>", "hi ", "<a>hi "},    // the template kept the trailing space
		{"<a>hi<e>", "hi ", "<a>hi"},      // the template trimmed it
		{"<a> hi<e>", " hi", "<a> hi"},    // a leading space
		{"hi<e>hi<e>", "hi", "hi<e>hi"},   // the last occurrence
		{"<a>hi\n<e>", "hi\n", "<a>hi\n"}, // a newline kept
	} {
		got, e := continueFinalMessage(c.rendered, c.final)
		if e != nil || got != c.want {
			t.Errorf("continueFinalMessage(%q, %q) = %q, %v; want %q", c.rendered, c.final, got, e, c.want)
		}
	}
	if _, e := continueFinalMessage("<a>x<e>", "hi"); e == nil {
		t.Error("a final message the render lacks was continued")
	}
}

// TestServeContinueFinalMessage: a chat with continue_final_message
// renders the last message open-ended (/tokenize shows the tokens) and
// the model continues it, as a completion of that text does;
// add_generation_prompt true beside it is a 400.
func TestServeContinueFinalMessage(t *testing.T) {
	const tmpl = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
	ts := newTestServer(t, serverOpts{template: tmpl})
	messages := `[{"role": "user", "content": "Tell me a story"}, {"role": "assistant", "content": "Once upon a time "}]`
	tokens := func(body string) []int {
		t.Helper()
		status, out := ts.post(t, "/tokenize", body)
		var r struct{ Tokens []int }
		if err := json.Unmarshal(out, &r); status != 200 || err != nil {
			t.Fatalf("tokenize %s: %d %s", body, status, out)
		}
		return r.Tokens
	}
	got := tokens(`{"messages": ` + messages + `, "continue_final_message": true}`)
	want := tokens(`{"prompt": "<|user|>Tell me a story<|end|><|assistant|>Once upon a time ", "add_special_tokens": false}`)
	if mustJSON(got) != mustJSON(want) {
		t.Fatalf("continued chat tokens %v, the open-ended text's %v", got, want)
	}
	status, out := ts.post(t, "/v1/chat/completions", `{"model": "stories260K", "messages": `+messages+`, "continue_final_message": true, "add_generation_prompt": false, "max_tokens": 12, "temperature": 0}`)
	var chat struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal(out, &chat); status != 200 || err != nil || len(chat.Choices) != 1 {
		t.Fatalf("chat: %d %s", status, out)
	}
	status, out = ts.post(t, "/v1/completions", `{"model": "stories260K", "prompt": `+mustJSON(want)+`, "max_tokens": 12, "temperature": 0}`)
	var comp struct{ Choices []struct{ Text string } }
	if err := json.Unmarshal(out, &comp); status != 200 || err != nil || len(comp.Choices) != 1 {
		t.Fatalf("completion: %d %s", status, out)
	}
	if chat.Choices[0].Message.Content != comp.Choices[0].Text {
		t.Fatalf("continued chat %q, completion of its text %q", chat.Choices[0].Message.Content, comp.Choices[0].Text)
	}
	if status, out := ts.post(t, "/v1/chat/completions", `{"model": "stories260K", "messages": `+messages+`, "continue_final_message": true, "add_generation_prompt": true}`); status != 400 {
		t.Fatalf("both true: %d %s", status, out)
	}
}

// TestServeDocuments: a request's documents reach the template as its
// documents variable, on chat and /tokenize; chat_template_kwargs may
// not set them beside.
func TestServeDocuments(t *testing.T) {
	const tmpl = "{% for d in documents %}[{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}]{% endfor %}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
	ts := newTestServer(t, serverOpts{template: tmpl})
	req := `"messages": [{"role": "user", "content": "Who is Lily?"}], "documents": [{"title": "cat", "text": "Lily is a cat."}, {"text": "Ben is a dog.", "title": "dog"}]`
	status, out := ts.post(t, "/tokenize", `{`+req+`, "add_generation_prompt": false}`)
	var got struct{ Tokens []int }
	if err := json.Unmarshal(out, &got); status != 200 || err != nil {
		t.Fatalf("tokenize: %d %s", status, out)
	}
	status, out = ts.post(t, "/tokenize", `{"prompt": "[title=cat;text=Lily is a cat.;][text=Ben is a dog.;title=dog;]<|user|>Who is Lily?", "add_special_tokens": false}`)
	var want struct{ Tokens []int }
	if err := json.Unmarshal(out, &want); status != 200 || err != nil || mustJSON(got.Tokens) != mustJSON(want.Tokens) {
		t.Fatalf("documents rendered as %v, want %v (%s)", got.Tokens, want.Tokens, out)
	}
	if status, out := ts.post(t, "/v1/chat/completions", `{"model": "stories260K", `+req+`, "max_tokens": 2}`); status != 200 {
		t.Fatalf("chat with documents: %d %s", status, out)
	}
	if status, out := ts.post(t, "/v1/chat/completions", `{"model": "stories260K", `+req+`, "chat_template_kwargs": {"documents": []}}`); status != 400 {
		t.Fatalf("documents twice: %d %s", status, out)
	}
	if status, out := ts.post(t, "/v1/chat/completions", `{"model": "stories260K", "messages": [{"role": "user", "content": "hi"}], "documents": [{"n": 1}]}`); status != 400 {
		t.Fatalf("a document of a number: %d %s", status, out)
	}
}
