package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/gearboxlm/gearbox/clock"
)

// client streams one benchmark request at a time to an OpenAI-compatible
// server; it is safe for concurrent use.
type client struct {
	http        *http.Client
	url         string // base URL + endpoint
	chat        bool   // chat completions: messages in, deltas out
	model       string
	loras       []string // models to choose among per request (Options.LoRAModules); nil: model
	seed        uint64   // of the choice
	apiKey      string
	ignoreEOS   bool
	temperature float64
	timeout     time.Duration // per request; 0: none
	clock       clock.Clock
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// requestBody is a completions or chat completions request. Only fields
// every OpenAI-compatible server knows are sent, plus ignore_eos (a vLLM
// and SGLang extension) when asked for.
type requestBody struct {
	Model               string        `json:"model"`
	Prompt              string        `json:"prompt,omitempty"`
	Messages            []chatMessage `json:"messages,omitempty"`
	MaxTokens           int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens int           `json:"max_completion_tokens,omitempty"`
	Temperature         float64       `json:"temperature"`
	Stream              bool          `json:"stream"`
	StreamOptions       streamOptions `json:"stream_options"`
	IgnoreEOS           bool          `json:"ignore_eos,omitempty"`
}

// streamChunk is the part of a streamed chunk the client reads: text from
// completions (choices[].text) or chat (choices[].delta.content, and the
// reasoning fields of reasoning models), usage, and an error event.
type streamChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// body is the JSON request for prompt, the workload's index-th request.
func (c *client) body(prompt string, maxTokens, index int) ([]byte, error) {
	b := requestBody{
		Model: c.modelFor(index), Temperature: c.temperature, Stream: true,
		StreamOptions: streamOptions{IncludeUsage: true}, IgnoreEOS: c.ignoreEOS,
	}
	if c.chat {
		b.Messages = []chatMessage{{Role: "user", Content: prompt}}
		b.MaxCompletionTokens = maxTokens
	} else {
		b.Prompt = prompt
		b.MaxTokens = maxTokens
	}
	return json.Marshal(b)
}

// modelFor is the model request index names: one of the LoRA modules,
// chosen at random (reproducibly, by the seed and the index) as vLLM's
// bench serve chooses, or the model.
func (c *client) modelFor(index int) string {
	if len(c.loras) == 0 {
		return c.model
	}
	return c.loras[rand.New(rand.NewPCG(c.seed, uint64(index))).IntN(len(c.loras))]
}

// send posts body, req's request, streams the response and measures it
// from start, the moment the dispatcher let it go, reporting times from
// runStart. cancelled reports that ctx ended the request, which then
// belongs to no report.
func (c *client) send(ctx context.Context, body []byte, req Request, runStart, start time.Time) (res RequestResult, cancelled bool) {
	res = RequestResult{Index: req.Index, RequestedInputTokens: req.InputTokens, InputTokens: req.InputTokens}
	fail := func(class, format string, args ...any) (RequestResult, bool) {
		res.Failure, res.Error = class, fmt.Sprintf(format, args...)
		res.OutputTokens, res.TTFT, res.ITL, res.Latency = 0, 0, nil, 0
		return res, false
	}
	reqCtx, cancel := ctx, context.CancelFunc(func() {})
	if c.timeout > 0 {
		reqCtx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	defer cancel()
	hreq, err := http.NewRequestWithContext(reqCtx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return fail("client error", "%v", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("User-Agent", "gearbox-bench")
	if c.apiKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	// ended classifies a transport error: the run's cancellation, the
	// request's own timeout, or what else went wrong.
	ended := func(err error, class, what string) (RequestResult, bool) {
		switch {
		case ctx.Err() != nil:
			return res, true
		case errors.Is(reqCtx.Err(), context.DeadlineExceeded):
			return fail("timeout", "timeout after %v %s", c.timeout, what)
		default:
			return fail(class, "%s: %v", what, err)
		}
	}

	res.Start = start.Sub(runStart)
	resp, err := c.http.Do(hreq)
	if err != nil {
		return ended(err, "connection error", "waiting for the response")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, typ := errorBody(resp.Body)
		class := fmt.Sprintf("HTTP %d", resp.StatusCode)
		if typ != "" {
			class += " " + typ
		}
		return fail(class, "HTTP %s: %s", resp.Status, msg)
	}

	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fail("not streamed", "the server answered %s, not an event stream: %s", ct, truncate(strings.TrimSpace(string(b)), 300))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 16<<10), 16<<20)
	var first, last time.Time
	chunks, done := 0, false
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue // blank separators, ": ping" comments, event: and id: fields
		}
		data = strings.TrimPrefix(data, " ")
		if data == "[DONE]" {
			done = true
			break
		}
		now := c.clock.Now()
		var ch streamChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return fail("stream error", "bad chunk %q: %v", truncate(data, 200), err)
		}
		if len(ch.Error) > 0 && string(ch.Error) != "null" {
			return fail("stream error", "error event: %s", errorText(ch.Error))
		}
		if ch.Usage != nil {
			res.OutputTokens = ch.Usage.CompletionTokens
			if ch.Usage.PromptTokens > 0 {
				res.InputTokens = ch.Usage.PromptTokens
			}
		}
		text := ""
		for _, choice := range ch.Choices {
			text += choice.Text + choice.Delta.Content + choice.Delta.ReasoningContent + choice.Delta.Reasoning
		}
		if text == "" {
			continue
		}
		if chunks == 0 {
			first = now
		} else {
			res.ITL = append(res.ITL, now.Sub(last))
		}
		last = now
		chunks++
	}
	if !done {
		err := sc.Err()
		if err == nil {
			return fail("truncated stream", "the stream ended before [DONE] after %d chunks with text", chunks)
		}
		return ended(err, "truncated stream", fmt.Sprintf("reading the stream after %d chunks with text", chunks))
	}
	if chunks == 0 {
		return fail("empty response", "the stream had no text")
	}
	// Drain what follows [DONE] so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	res.TTFT = first.Sub(start)
	res.Latency = last.Sub(start)
	if res.OutputTokens <= 0 {
		res.OutputTokens = chunks
	}
	return res, false
}

// errorBody reads an error response: OpenAI's {"error": {"message",
// "type"}} or the flat {"message", "type"} older vLLM servers send; else
// the body's text.
func errorBody(r io.Reader) (msg, typ string) {
	b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
	}
	if json.Unmarshal(b, &e) == nil {
		if len(e.Error) > 0 {
			var inner struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			}
			if json.Unmarshal(e.Error, &inner) == nil && inner.Message != "" {
				return inner.Message, inner.Type
			}
			return errorText(e.Error), ""
		}
		if e.Message != "" {
			return e.Message, e.Type
		}
	}
	return truncate(strings.TrimSpace(string(b)), 500), ""
}

// errorText is the message of an error event: an object's "message", a
// string, or the raw JSON.
func errorText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Message != "" {
		return o.Message
	}
	return truncate(string(raw), 500)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
