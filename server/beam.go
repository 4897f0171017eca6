package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
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
	eng, width, eos := s.opts.Engine, g.n, s.endTokens()
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
			// No SLO tier: a beam step is not a request whose latency a
			// tier's targets describe.
			st, err := eng.Submit(engine.Request{ID: s.newID("beam"), Prompt: b.tokens, MaxTokens: 1, IgnoreEOS: true, Priority: g.priority,
				Adapter: g.adapter, Sampling: sample.Params{Logprobs: 2 * width}})
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

// beamJobs runs a beam search for each prompt (truncated and checked
// against the context as start does, by promptBudget; defaultMax gives max_tokens when the
// request has none) and returns its beams as finished jobs, n a prompt in
// score order: each with the text after the prompt (a final end token
// left out), finish "stop" for a beam that ended with an end token,
// "length" otherwise. The non-streaming response code reads them as it
// reads the engine's.
func (s *Server) beamJobs(ctx context.Context, prompts [][]int, g generation, defaultMax func(promptLen int) int, lengthPenalty *float64, promptParam string) ([]*job, *apiError) {
	limit := s.opts.Engine.MaxModelLen()
	penalty := 1.0
	if lengthPenalty != nil {
		penalty = *lengthPenalty
	}
	var jobs []*job
	for p, ids := range prompts {
		ids, maxTokens, e := promptBudget(ids, g, defaultMax, limit, promptParam)
		if e != nil {
			return nil, e
		}
		prompts[p] = ids
		beams, e := s.beamSearch(ctx, ids, g, maxTokens, penalty)
		if e != nil {
			return nil, e
		}
		for _, b := range beams {
			out := b.tokens[len(ids):]
			j := &job{index: len(jobs), prompt: p, tokens: out, finish: b.finish, usage: engine.Usage{PromptTokens: len(ids), CompletionTokens: len(out)}}
			if b.finish == engine.FinishStop {
				out = out[:len(out)-1]
			}
			j.text = s.opts.Tokenizer.Decode(out, !g.special)
			jobs = append(jobs, j)
		}
	}
	return jobs, nil
}
