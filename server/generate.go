package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/tokenizer"
)

// job is one choice being generated.
type job struct {
	index  int
	prompt int // index of its prompt
	stream *engine.Stream
	id     string
	// accumulated for non-streaming responses
	text      string
	tokens    []int
	logprobs  []sample.Result
	promptLP  []sample.Result // the prompt's log-probabilities (Event.PromptLogprobs)
	embedding []float32       // an embedding request's (Event.Embedding)
	finish    string
	usage     engine.Usage
	err       error
}

// usage is OpenAI's usage object.
type usage struct {
	PromptTokens        int            `json:"prompt_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// start submits g.n choices for every prompt; defaultMax gives the
// completion budget when the request names none. On failure it aborts
// the choices it started.
func (s *Server) start(prompts [][]int, g generation, defaultMax func(promptLen int) int, promptParam string) ([]*job, *apiError) {
	eng := s.opts.Engine
	limit := eng.MaxModelLen()
	if g.format != nil && s.opts.Tokenizer == nil {
		return nil, invalid("response_format", "structured output needs the model's tokenizer")
	}
	if g.format != nil && !g.format.Free() && g.minTokens > 0 {
		return nil, invalid("min_tokens", "min_tokens cannot be combined with an output format (response_format, guided_*, a forced tool_choice): the format may be complete before it")
	}
	var jobs []*job
	fail := func(e *apiError) ([]*job, *apiError) {
		for _, j := range jobs {
			eng.Abort(j.id)
		}
		return nil, e
	}
	if len(g.badWords) > 0 {
		if s.opts.Tokenizer == nil {
			return nil, invalid("bad_words", "bad_words need the model's tokenizer")
		}
		g.params.BadWords = badWordTokens(s.opts.Tokenizer, g.badWords)
	}
	for p, ids := range prompts {
		ids, maxTokens, e := promptBudget(ids, g, defaultMax, limit, promptParam)
		if e != nil {
			return fail(e)
		}
		prompts[p] = ids
		for c := 0; c < g.n; c++ {
			params := g.params
			if params.HasSeed {
				params.Seed += int64(c) // distinct but reproducible choices, as vLLM seeds n > 1
			}
			id := s.newID("req")
			req := engine.Request{
				ID: id, Prompt: ids, MaxTokens: maxTokens, Sampling: params, Stop: g.stops, StopTokenIDs: g.stopIDs,
				IgnoreEOS: g.ignoreEOS, MinTokens: g.minTokens, IncludeStop: g.keepStop, KeepSpecial: g.special, Priority: g.priority, Tier: g.tier,
				PromptLogprobs: g.promptLogprobs >= 0, PromptTopLogprobs: max(g.promptLogprobs, 0), Adapter: g.adapter,
			}
			if format := g.format; format != nil {
				if s.opts.CompactJSON && !format.Free() {
					format = format.WithoutWhitespace()
				}
				req.Constraint = s.structuredVocab().Matcher(format)
			}
			st, err := eng.Submit(req)
			if err != nil {
				return fail(submitError(err, promptParam))
			}
			jobs = append(jobs, &job{index: len(jobs), prompt: p, stream: st, id: id})
		}
	}
	return jobs, nil
}

// promptBudget checks one prompt against the context limit: it returns
// the prompt cut to truncate_prompt_tokens and the tokens its completion
// may have (max_tokens, or defaultMax of the prompt's length within the
// context), or the error the request gets.
func promptBudget(ids []int, g generation, defaultMax func(promptLen int) int, limit int, promptParam string) ([]int, int, *apiError) {
	if len(ids) == 0 {
		return nil, 0, invalid(promptParam, "the prompt is empty")
	}
	ids = truncated(ids, g.truncate, limit)
	if len(ids) >= limit {
		return nil, 0, invalid(promptParam, "This model's maximum context length is %d tokens. However, your prompt has %d tokens. Please reduce the length of the prompt.", limit, len(ids))
	}
	maxTokens := g.maxTokens
	if maxTokens == 0 {
		maxTokens = min(defaultMax(len(ids)), limit-len(ids))
	} else if len(ids)+maxTokens > limit {
		return nil, 0, invalid("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion). Please reduce the length of the prompt or completion.",
			limit, len(ids)+maxTokens, len(ids), maxTokens)
	}
	if g.minTokens > maxTokens {
		return nil, 0, invalid("min_tokens", "min_tokens %d is above the %d tokens this completion may have", g.minTokens, maxTokens)
	}
	return ids, maxTokens, nil
}

// badWordTokens tokenizes bad_words as vLLM does: each word with its
// leading spaces trimmed, and again after one space where that spelling
// is a different first token and as many tokens (the same word in the
// middle of a text).
func badWordTokens(tok *tokenizer.Tokenizer, words []string) [][]int {
	var out [][]int
	for _, w := range words {
		w = strings.TrimLeft(w, " ")
		bare := tok.Encode(w, false)
		out = append(out, bare)
		if spaced := tok.Encode(" "+w, false); len(spaced) > 0 && len(bare) > 0 && spaced[0] != bare[0] && len(spaced) == len(bare) {
			out = append(out, spaced)
		}
	}
	return out
}

// event is one job's engine event.
type event struct {
	job *job
	ev  engine.Event
}

// fanIn delivers every job's events in arrival order and closes the
// channel when all jobs have ended. If ctx ends first (the client went
// away), it aborts the jobs still running.
func (s *Server) fanIn(ctx context.Context, jobs []*job) <-chan event {
	out := make(chan event)
	done := make(chan struct{})
	left := len(jobs)
	finished := make(chan struct{}, len(jobs))
	for _, j := range jobs {
		go func() {
			defer func() { finished <- struct{}{} }()
			for {
				ev, err := j.stream.Recv(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					s.opts.Engine.Abort(j.id)
					return
				}
				select {
				case out <- event{j, ev}:
				case <-done:
					s.opts.Engine.Abort(j.id)
					return
				}
			}
		}()
	}
	allDone := make(chan struct{})
	go func() {
		for ; left > 0; left-- {
			<-finished
		}
		close(out)
		close(allDone)
	}()
	go func() {
		select {
		case <-ctx.Done():
			close(done)
		case <-allDone:
		}
	}()
	return out
}

// collect waits for every job to finish, accumulating its output. Jobs
// without a stream (beam search's) are finished already.
func (s *Server) collect(ctx context.Context, jobs []*job) *apiError {
	var running []*job
	for _, j := range jobs {
		if j.stream != nil {
			running = append(running, j)
		}
	}
	for e := range s.fanIn(ctx, running) {
		j := e.job
		j.text += e.ev.Text
		j.tokens = append(j.tokens, e.ev.Tokens...)
		j.logprobs = append(j.logprobs, e.ev.Logprobs...)
		if e.ev.PromptLogprobs != nil {
			j.promptLP = e.ev.PromptLogprobs
		}
		if e.ev.Embedding != nil {
			j.embedding = e.ev.Embedding
		}
		j.usage = e.ev.Usage
		if e.ev.Finish != "" {
			j.finish, j.err = e.ev.Finish, e.ev.Err
		}
	}
	if err := ctx.Err(); err != nil {
		return invalid("", "request cancelled: %v", err)
	}
	for _, j := range jobs {
		if j.finish == engine.FinishError {
			return internal(fmt.Errorf("generation failed: %w", j.err))
		}
		if j.finish == engine.FinishCancelled || j.finish == "" {
			return draining()
		}
	}
	return nil
}

// totalUsage sums usage over jobs, counting each prompt once.
func totalUsage(jobs []*job, prompts [][]int) usage {
	var u usage
	cached := 0
	seen := map[int]bool{}
	for _, j := range jobs {
		u.CompletionTokens += j.usage.CompletionTokens
		if !seen[j.prompt] {
			seen[j.prompt] = true
			u.PromptTokens += len(prompts[j.prompt])
			cached += j.usage.CachedTokens
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if cached > 0 {
		u.PromptTokensDetails = &promptDetails{CachedTokens: cached}
	}
	return u
}

// streamJobs writes a whole SSE response: first's chunks (role headers),
// then one chunk per event as chunk builds it (nil skips the event),
// error events for failed choices, the usage chunk when asked, and
// [DONE]. It returns early when the client goes away (fanIn then aborts
// the jobs).
func (s *Server) streamJobs(w http.ResponseWriter, r *http.Request, jobs []*job, first []any, chunk func(event) any, usageChunk func() any) {
	out := newSSE(w)
	for _, c := range first {
		if out.send(c) != nil {
			return
		}
	}
	for ev := range s.fanIn(r.Context(), jobs) {
		ev.job.usage = ev.ev.Usage
		if ev.ev.Finish == engine.FinishError {
			_ = out.send(map[string]any{"error": internal(ev.ev.Err)})
			continue
		}
		c := chunk(ev)
		if c == nil {
			continue
		}
		if out.send(c) != nil {
			return
		}
	}
	if usageChunk != nil && r.Context().Err() == nil {
		_ = out.send(usageChunk())
	}
	out.done()
}

// chunkUsage is the usage a streamed chunk of a choice carries: its
// counts so far under stream_options.continuous_usage_stats, else none.
func (c *commonParams) chunkUsage(u engine.Usage) *usage {
	if c.StreamOptions == nil || !c.StreamOptions.ContinuousUsage {
		return nil
	}
	out := usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	if u.CachedTokens > 0 {
		out.PromptTokensDetails = &promptDetails{CachedTokens: u.CachedTokens}
	}
	return &out
}

// tokenName names a token in log-probabilities: its text, or with
// return_tokens_as_token_ids "token_id:N", which survives tokens that are
// not whole UTF-8.
func (s *Server) tokenName(c *commonParams, id int) string {
	if c.TokensAsIDs {
		return "token_id:" + strconv.Itoa(id)
	}
	return s.tokenText(id)
}

// includeUsage reports whether stream_options asks for the usage chunk.
func (c *commonParams) includeUsage() bool {
	return c.StreamOptions != nil && c.StreamOptions.IncludeUsage
}

// sse writes server-sent events.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

func (s *sse) send(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", data); err != nil {
		return err
	}
	return s.rc.Flush()
}

// event sends v as the named event (the Responses API's streams name
// each event by its type).
func (s *sse) event(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, data); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sse) done() {
	fmt.Fprint(s.w, "data: [DONE]\n\n")
	_ = s.rc.Flush()
}

// finishReason maps an engine finish to OpenAI's (nil while running).
func finishReason(f string) *string {
	switch f {
	case "":
		return nil
	case engine.FinishStop, engine.FinishLength:
		return &f
	}
	s := "abort"
	return &s
}

// logprob clamps -Inf to -9999 as vLLM does: JSON has no infinities.
func logprob(x float32) float64 { return max(float64(x), -9999) }
