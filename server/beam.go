package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/sample"
)

// maxBeamWidth bounds n under use_beam_search: each step asks for the 2n
// most likely next tokens of every beam, at most maxLogprobs.
const maxBeamWidth = maxLogprobs / 2

// beam is one hypothesis of a beam search.
type beam struct {
	tokens []int   // the prompt, then the generated tokens
	cum    float64 // sum of the generated tokens' log-probabilities
	finish string  // engine.FinishStop once it ends with an end token, else FinishLength
}

// beamScore is vLLM's get_beam_search_score: the cumulative
// log-probability over the sequence's length (the prompt's tokens
// included, a final end token not) to the power lengthPenalty.
func beamScore(b *beam, lengthPenalty float64) float64 {
	n := len(b.tokens)
	if b.finish == engine.FinishStop {
		n--
	}
	return b.cum / math.Pow(float64(n), lengthPenalty)
}

// checkBeam refuses what a beam search does not do (vLLM's takes only n,
// max_tokens, ignore_eos, temperature and length_penalty), rather than
// ignoring it.
func (c *commonParams) checkBeam(g *generation, logprobs int) *apiError {
	switch {
	case !c.UseBeamSearch:
		if c.LengthPenalty != nil {
			return invalid("length_penalty", "length_penalty is a parameter of beam search (use_beam_search)")
		}
		return nil
	case g.n > maxBeamWidth:
		return invalid("n", "n, the beam width, must be at most %d with use_beam_search", maxBeamWidth)
	case c.Stream:
		return invalid("stream", "use_beam_search does not stream")
	case logprobs >= 0 || g.promptLogprobs >= 0:
		return invalid("logprobs", "use_beam_search returns no log-probabilities")
	case g.format != nil:
		return invalid("response_format", "use_beam_search cannot hold the text to an output format")
	case len(g.stops) > 0 || len(g.stopIDs) > 0:
		return invalid("stop", "use_beam_search ends beams at the end token only, not at stop strings or tokens")
	case g.minTokens > 0:
		return invalid("min_tokens", "use_beam_search does not take min_tokens")
	}
	if c.LengthPenalty != nil && (math.IsNaN(*c.LengthPenalty) || math.IsInf(*c.LengthPenalty, 0)) {
		return invalid("length_penalty", "length_penalty must be a finite number")
	}
	return nil
}

// beamSearch runs vLLM's beam search over prompt and returns the width
// best hypotheses, best first. Each step extends every live beam by each
// of its 2·width most likely next tokens (one-token requests of the
// engine, whose prefix cache holds the beams' shared blocks), keeps the
// width best by beamScore, and sets aside those that end with an end
// token (unless ignoreEOS); after maxTokens steps the set-aside and live
// beams compete together. The log-probabilities are the model's raw ones
// (temperature does not change them, as in vLLM).
func (s *Server) beamSearch(ctx context.Context, prompt []int, g generation, maxTokens int, lengthPenalty float64) ([]*beam, *apiError) {
	eng, width := s.opts.Engine, g.n
	eos := s.opts.EOSTokens
	if eos == nil && s.opts.Tokenizer != nil {
		eos = s.opts.Tokenizer.EOS()
	}
	limit := eng.MaxModelLen()
	live := []*beam{{tokens: slices.Clone(prompt), finish: engine.FinishLength}}
	var done []*beam
	byScore := func(a, b *beam) int { return cmp.Compare(beamScore(b, lengthPenalty), beamScore(a, lengthPenalty)) }
	for range maxTokens {
		if len(live) == 0 {
			break
		}
		streams := make([]*engine.Stream, 0, len(live))
		abort := func() {
			for _, st := range streams {
				eng.Abort(st.ID())
			}
		}
		for _, b := range live {
			st, err := eng.Submit(engine.Request{ID: s.newID("beam"), Prompt: b.tokens, MaxTokens: 1, IgnoreEOS: true, Priority: g.priority,
				Tier: g.tier, Adapter: g.adapter, Sampling: sample.Params{Logprobs: 2 * width}})
			if err != nil {
				abort()
				return nil, submitError(err, "prompt")
			}
			streams = append(streams, st)
		}
		var next []*beam
		for i, st := range streams {
			top, e := firstTop(ctx, st)
			if e != nil {
				abort()
				return nil, e
			}
			for _, c := range top {
				nb := &beam{tokens: append(slices.Clip(live[i].tokens), c.Token), cum: live[i].cum + float64(c.Logprob), finish: engine.FinishLength}
				switch {
				case !g.ignoreEOS && slices.Contains(eos, c.Token):
					nb.finish = engine.FinishStop
					done = append(done, nb)
				case len(nb.tokens) >= limit: // the context is full: this beam ends here
					done = append(done, nb)
				default:
					next = append(next, nb)
				}
			}
		}
		slices.SortStableFunc(next, byScore)
		live = next[:min(width, len(next))]
	}
	all := append(done, live...)
	slices.SortStableFunc(all, byScore)
	return all[:min(width, len(all))], nil
}

// firstTop reads a one-token request's stream to its end and returns the
// most likely tokens of its one position; errors as collect gives them.
func firstTop(ctx context.Context, st *engine.Stream) ([]sample.Logprob, *apiError) {
	var top []sample.Logprob
	for {
		ev, err := st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return top, nil
		}
		if err != nil {
			return nil, invalid("", "request cancelled: %v", err)
		}
		switch ev.Finish {
		case engine.FinishError:
			return nil, internal(fmt.Errorf("generation failed: %w", ev.Err))
		case engine.FinishCancelled:
			return nil, draining()
		}
		if len(ev.Logprobs) > 0 {
			top = ev.Logprobs[0].Top
		}
	}
}

// completeBeams answers a completion request with use_beam_search: for
// each prompt, its n best beams as choices, in score order, with the text
// after the prompt (a final end token left out) and finish_reason "stop"
// for a beam that ended with an end token, "length" otherwise.
func (s *Server) completeBeams(w http.ResponseWriter, r *http.Request, req *completionRequest, g generation, prompts [][]int, texts []string) {
	limit := s.opts.Engine.MaxModelLen()
	penalty := 1.0
	if req.LengthPenalty != nil {
		penalty = *req.LengthPenalty
	}
	resp := completionResponse{ID: s.newID("cmpl"), Object: "text_completion", Created: s.opts.Clock.Now().Unix(), Model: req.Model}
	var u usage
	for p, ids := range prompts {
		ids = truncated(ids, g.truncate, limit)
		if len(ids) >= limit {
			writeError(w, invalid("prompt", "This model's maximum context length is %d tokens. However, your prompt has %d tokens. Please reduce the length of the prompt.", limit, len(ids)))
			return
		}
		maxTokens := g.maxTokens
		if maxTokens == 0 {
			maxTokens = min(16, limit-len(ids)) // OpenAI's default for completions
		} else if len(ids)+maxTokens > limit {
			writeError(w, invalid("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion). Please reduce the length of the prompt or completion.",
				limit, len(ids)+maxTokens, len(ids), maxTokens))
			return
		}
		beams, e := s.beamSearch(r.Context(), ids, g, maxTokens, penalty)
		if e != nil {
			writeError(w, e)
			return
		}
		u.PromptTokens += len(ids)
		for _, b := range beams {
			out := b.tokens[len(ids):]
			u.CompletionTokens += len(out)
			if b.finish == engine.FinishStop {
				out = out[:len(out)-1]
			}
			text := s.opts.Tokenizer.Decode(out, !g.special)
			if req.Echo {
				text = texts[p] + text
			}
			resp.Choices = append(resp.Choices, completionChoice{Index: len(resp.Choices), Text: text, FinishReason: finishReason(b.finish)})
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	resp.Usage = &u
	writeJSON(w, http.StatusOK, resp)
}
