package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/gearboxlm/gearbox/sample"
)

type completionRequest struct {
	commonParams
	Prompt   json.RawMessage `json:"prompt"`
	Echo     bool            `json:"echo"`
	Logprobs *int            `json:"logprobs"`
	Suffix   *string         `json:"suffix"`
}

var completionFields = knownFields(append([]string{"prompt", "echo", "logprobs", "suffix"}, commonFieldNames...)...)

type completionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   *string             `json:"finish_reason"`
	PromptLogprobs promptLogprobs      `json:"prompt_logprobs,omitempty"` // vLLM's, with prompt_logprobs
}

// completionLogprobs is the legacy logprobs object. With echo the prompt's
// tokens come first, the first of them with null log-probabilities.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage"`
}

// completions serves POST /v1/completions.
func (s *Server) completions(w http.ResponseWriter, r *http.Request, body []byte) {
	var req completionRequest
	if e := s.decode(body, &req, completionFields); e != nil {
		writeError(w, e)
		return
	}
	logprobs := -1
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > maxLogprobs {
			writeError(w, invalid("logprobs", "logprobs must be in [0, %d], got %d", maxLogprobs, *req.Logprobs))
			return
		}
		logprobs = *req.Logprobs
	}
	req.withDefaults(s.opts.Defaults)
	g, e := req.validate(logprobs)
	if e == nil {
		g.tier, e = s.resolveTier(r, req.SLOTier)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	if g.adapter, e = s.resolveModel(req.Model); e != nil {
		writeError(w, e)
		return
	}
	if req.Suffix != nil && *req.Suffix != "" {
		writeError(w, invalid("suffix", "suffix is not supported"))
		return
	}
	if req.Echo && logprobs >= 0 {
		g.promptLogprobs = max(g.promptLogprobs, logprobs) // the echoed prompt's tokens come with theirs
	}
	prompts, texts, e := s.parsePrompt("prompt", req.Prompt, true)
	if e != nil {
		writeError(w, e)
		return
	}
	if e := req.checkBeam(&g, logprobs); e != nil {
		writeError(w, e)
		return
	}
	defaultMax := func(int) int { return 16 } // OpenAI's default max_tokens for completions
	var jobs []*job
	if req.UseBeamSearch { // finished jobs, answered below as collected ones
		jobs, e = s.beamJobs(r.Context(), prompts, g, defaultMax, req.LengthPenalty, "prompt")
	} else {
		jobs, e = s.start(prompts, g, defaultMax, "prompt")
	}
	if e != nil {
		writeError(w, e)
		return
	}
	if req.Echo && g.truncate != 0 { // echo the prompt as truncated
		for i, ids := range prompts {
			texts[i] = s.opts.Tokenizer.Decode(ids, false)
		}
	}
	id, created := s.newID("cmpl"), s.opts.Clock.Now().Unix()
	if req.Stream {
		echoed := map[int]bool{}
		offsets := map[int]int{} // text offset of each choice's next token
		chunk := func(ev event) any {
			text := ev.ev.Text
			var lp *completionLogprobs
			if logprobs >= 0 && len(ev.ev.Logprobs) > 0 {
				lp = &completionLogprobs{}
			}
			if req.Echo && !echoed[ev.job.index] {
				echoed[ev.job.index] = true
				text = texts[ev.job.prompt] + text
				if lp != nil {
					offsets[ev.job.index] = s.appendPromptLogprobs(&req.commonParams, lp, prompts[ev.job.prompt], ev.ev.PromptLogprobs, logprobs)
				}
			}
			if text == "" && ev.ev.Finish == "" && len(ev.ev.Tokens) == 0 {
				return nil
			}
			ch := completionChoice{Index: ev.job.index, Text: text, FinishReason: finishReason(ev.ev.Finish)}
			if req.PromptLogprobs != nil && ev.ev.PromptLogprobs != nil {
				ch.PromptLogprobs = s.promptLogprobsOf(&req.commonParams, ev.ev.PromptLogprobs, *req.PromptLogprobs)
			}
			if lp != nil {
				offsets[ev.job.index] = s.appendLogprobs(&req.commonParams, lp, ev.ev.Tokens, ev.ev.Logprobs, offsets[ev.job.index])
				ch.Logprobs = lp
			}
			return completionResponse{ID: id, Object: "text_completion", Created: created, Model: req.Model, Choices: []completionChoice{ch}, Usage: req.chunkUsage(ev.ev.Usage)}
		}
		var usageChunk func() any
		if req.includeUsage() {
			usageChunk = func() any {
				u := totalUsage(jobs, prompts)
				return completionResponse{ID: id, Object: "text_completion", Created: created, Model: req.Model, Choices: []completionChoice{}, Usage: &u}
			}
		}
		s.streamJobs(w, r, jobs, nil, chunk, usageChunk)
		return
	}
	if e := s.collect(r.Context(), jobs); e != nil {
		writeError(w, e)
		return
	}
	resp := completionResponse{ID: id, Object: "text_completion", Created: created, Model: req.Model}
	for _, j := range jobs {
		text := j.text
		if req.Echo {
			text = texts[j.prompt] + text
		}
		ch := completionChoice{Index: j.index, Text: text, FinishReason: finishReason(j.finish)}
		if req.PromptLogprobs != nil {
			ch.PromptLogprobs = s.promptLogprobsOf(&req.commonParams, j.promptLP, *req.PromptLogprobs)
		}
		if logprobs >= 0 {
			ch.Logprobs = &completionLogprobs{}
			offset := 0
			if req.Echo {
				offset = s.appendPromptLogprobs(&req.commonParams, ch.Logprobs, prompts[j.prompt], j.promptLP, logprobs)
			}
			s.appendLogprobs(&req.commonParams, ch.Logprobs, j.tokens, j.logprobs, offset)
		}
		resp.Choices = append(resp.Choices, ch)
	}
	u := totalUsage(jobs, prompts)
	resp.Usage = &u
	writeJSON(w, http.StatusOK, resp)
}

// parsePrompt accepts a string, a list of strings, a list of token ids or
// a list of token-id lists (the request's field param), and returns the
// token ids and text of each; strings are encoded with the tokenizer's
// special tokens (its BOS) when special is set.
func (s *Server) parsePrompt(param string, raw json.RawMessage, special bool) ([][]int, []string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, invalid(param, "%s is required", param)
	}
	tok := s.opts.Tokenizer
	vocab := tok.VocabSize()
	fromIDs := func(ids []int) ([]int, string, *apiError) {
		if len(ids) == 0 {
			return nil, "", invalid(param, "the prompt is empty")
		}
		for _, id := range ids {
			if id < 0 || id >= vocab {
				return nil, "", invalid(param, "token id %d is outside the vocabulary [0, %d)", id, vocab)
			}
		}
		return ids, tok.Decode(ids, false), nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil, invalid(param, "the prompt is empty")
		}
		return [][]int{tok.Encode(one, special)}, []string{one}, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		if len(strs) == 0 {
			return nil, nil, invalid(param, "the prompt list is empty")
		}
		var ids [][]int
		for _, p := range strs {
			if p == "" {
				return nil, nil, invalid(param, "a prompt in the list is empty")
			}
			ids = append(ids, tok.Encode(p, special))
		}
		return ids, strs, nil
	}
	var idList []int
	if json.Unmarshal(raw, &idList) == nil {
		ids, text, e := fromIDs(idList)
		if e != nil {
			return nil, nil, e
		}
		return [][]int{ids}, []string{text}, nil
	}
	var idLists [][]int
	if json.Unmarshal(raw, &idLists) == nil && len(idLists) > 0 {
		var out [][]int
		var texts []string
		for _, l := range idLists {
			ids, text, e := fromIDs(l)
			if e != nil {
				return nil, nil, e
			}
			out, texts = append(out, ids), append(texts, text)
		}
		return out, texts, nil
	}
	return nil, nil, invalid(param, "%s must be a string, a list of strings, a list of token ids or a list of token-id lists", param)
}

// tokenText is the text a single token decodes to.
func (s *Server) tokenText(id int) string { return s.opts.Tokenizer.Decode([]int{id}, false) }

// appendLogprobs appends tokens and their log-probabilities to lp, named
// as c asks, the first at text offset offset, and returns the offset
// after the last.
func (s *Server) appendLogprobs(c *commonParams, lp *completionLogprobs, tokens []int, results []sample.Result, offset int) int {
	return s.appendLogprobsTop(c, lp, tokens, results, offset, maxLogprobs)
}

// appendLogprobsTop is appendLogprobs with at most top alternatives a
// token.
func (s *Server) appendLogprobsTop(c *commonParams, lp *completionLogprobs, tokens []int, results []sample.Result, offset, top int) int {
	for i, res := range results {
		t := s.tokenText(tokens[i])
		v := logprob(res.Logprob)
		lp.Tokens = append(lp.Tokens, s.tokenName(c, tokens[i]))
		lp.TokenLogprobs = append(lp.TokenLogprobs, &v)
		alts := map[string]float64{}
		for _, alt := range res.Top[:min(top, len(res.Top))] {
			name := s.tokenName(c, alt.Token)
			if _, dup := alts[name]; !dup {
				alts[name] = logprob(alt.Logprob)
			}
		}
		lp.TopLogprobs = append(lp.TopLogprobs, alts)
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += utf8.RuneCountInString(t)
	}
	return offset
}

// appendPromptLogprobs appends an echoed prompt's tokens to lp: the first
// with null log-probabilities (nothing precedes it), the others with
// results, theirs, with at most top alternatives (the request's logprobs:
// results may hold more, for prompt_logprobs); it returns the text offset
// after the prompt.
func (s *Server) appendPromptLogprobs(c *commonParams, lp *completionLogprobs, prompt []int, results []sample.Result, top int) int {
	t := s.tokenText(prompt[0])
	lp.Tokens = append(lp.Tokens, s.tokenName(c, prompt[0]))
	lp.TokenLogprobs = append(lp.TokenLogprobs, nil)
	lp.TopLogprobs = append(lp.TopLogprobs, nil)
	lp.TextOffset = append(lp.TextOffset, 0)
	return s.appendLogprobsTop(c, lp, prompt[1:], results, utf8.RuneCountInString(t), top)
}

// promptLogprobs is vLLM's prompt_logprobs: null for the first prompt
// token, then for each other token a map from token id to log-probability,
// rank and text, holding the token's own and its position's top most
// likely tokens.
type promptLogprobs []map[string]promptLogprob

type promptLogprob struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// promptLogprobsOf builds prompt_logprobs from the engine's results (one per
// prompt token after the first), with at most top alternatives each.
func (s *Server) promptLogprobsOf(c *commonParams, results []sample.Result, top int) promptLogprobs {
	out := make(promptLogprobs, 1, len(results)+1)
	for _, r := range results {
		m := map[string]promptLogprob{strconv.Itoa(r.Token): {Logprob: logprob(r.Logprob), Rank: r.Rank, DecodedToken: s.tokenName(c, r.Token)}}
		for i, alt := range r.Top[:min(top, len(r.Top))] {
			if key := strconv.Itoa(alt.Token); alt.Token != r.Token {
				m[key] = promptLogprob{Logprob: logprob(alt.Logprob), Rank: i + 1, DecodedToken: s.tokenName(c, alt.Token)}
			}
		}
		out = append(out, m)
	}
	return out
}
