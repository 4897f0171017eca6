package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/tokenizer"
)

// Request is one generation request.
type Request struct {
	Prompt       []int
	MaxTokens    int // completion tokens at most; the context length also bounds it
	Sampling     sample.Params
	Stop         []string // stop strings; the text ends before the first one found
	StopTokenIDs []int    // extra token ids that end generation
	IgnoreEOS    bool     // keep generating past end-of-sequence tokens
}

// Finish reasons, as OpenAI names them.
const (
	FinishStop   = "stop"   // an EOS or stop token, or a stop string
	FinishLength = "length" // max tokens or the context length
)

// Output is a finished generation.
type Output struct {
	Tokens       []int           // completion token ids (a final stop token included)
	Text         string          // completion text (stop strings and special tokens excluded)
	Logprobs     []sample.Result // one per completion token when Sampling.Logprobs >= 0
	FinishReason string
	PromptTokens int
	PrefillTime  time.Duration  // prompt processing until the first token
	DecodeTime   time.Duration  // from the first token to the last
	PlanSteps    map[string]int // steps run under each plan
}

// Generator runs one request at a time on an Executor: chunked prefill,
// then one decode step per token, with incremental detokenization, stop
// handling and sampling; the policy picks each step's plan. The serving
// scheduler batches many requests through the same Executor instead.
type Generator struct {
	Exec      *Executor
	Policy    policy.Policy // nil runs every step under the executor's base plan
	Tokenizer *tokenizer.Tokenizer
	EOS       []int
	Clock     clock.Clock
	ChunkSize int // prefill tokens per step; default 512
}

// ErrPromptTooLong is returned when a prompt does not fit the context.
var ErrPromptTooLong = errors.New("prompt too long")

// Generate runs req to completion. onText, if not nil, receives the
// completion text as it becomes final.
func (g *Generator) Generate(ctx context.Context, req Request, onText func(string)) (*Output, error) {
	cfg := g.Exec.Config()
	layout := g.Exec.KVLayout()
	n := len(req.Prompt)
	if n == 0 {
		return nil, fmt.Errorf("engine: empty prompt")
	}
	if n >= cfg.MaxPositions {
		return nil, fmt.Errorf("engine: %w: %d tokens, context length %d", ErrPromptTooLong, n, cfg.MaxPositions)
	}
	if req.MaxTokens <= 0 {
		return nil, fmt.Errorf("engine: max tokens must be positive, got %d", req.MaxTokens)
	}
	maxTokens := min(req.MaxTokens, cfg.MaxPositions-n)
	sampler, err := sample.New(req.Sampling, req.Prompt, cfg.Vocab)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	clk := g.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	chunk := g.ChunkSize
	if chunk <= 0 {
		chunk = 512
	}
	alloc := kvcache.NewAllocator(layout.NumBlocks)
	blocks, ok := alloc.Allocate(layout.BlocksFor(n + maxTokens))
	if !ok {
		return nil, fmt.Errorf("engine: KV cache too small: %d tokens need %d blocks, have %d", n+maxTokens, layout.BlocksFor(n+maxTokens), layout.NumBlocks)
	}

	stops := slices.Clone(req.StopTokenIDs)
	if !req.IgnoreEOS {
		stops = append(stops, g.EOS...)
	}
	out := &Output{PromptTokens: n, FinishReason: FinishLength, PlanSteps: map[string]int{}}
	step := func(sb SeqBatch) ([]float32, error) {
		plan := g.Exec.Plan()
		if g.Policy != nil {
			plan = g.Policy.Plan(policy.Step{Tokens: len(sb.Tokens), Seqs: 1})
		}
		out.PlanSteps[plan.String()]++
		return g.Exec.Step(ctx, &Batch{Seqs: []SeqBatch{sb}}, plan)
	}
	dec := g.Tokenizer.NewDecoder(req.Prompt, true)
	match := newStopMatcher(req.Stop)
	emit := func(s string) {
		out.Text += s
		if onText != nil && s != "" {
			onText(s)
		}
	}

	stoppedByString := false
	start := clk.Now()
	var logits []float32
	for pos := 0; pos < n; pos += chunk {
		end := min(pos+chunk, n)
		sb := SeqBatch{Tokens: req.Prompt[pos:end], Pos: pos, Blocks: blocks}
		if end == n {
			sb.NumLogits = 1
		}
		if logits, err = step(sb); err != nil {
			return nil, err
		}
	}
	first := clk.Now()
	out.PrefillTime = first.Sub(start)
	for pos := n; ; pos++ {
		res := sampler.Sample(logits)
		out.Tokens = append(out.Tokens, res.Token)
		if req.Sampling.Logprobs >= 0 {
			out.Logprobs = append(out.Logprobs, res)
		}
		if slices.Contains(stops, res.Token) {
			out.FinishReason = FinishStop
			break
		}
		text, stopped := match.Push(dec.Add(res.Token))
		emit(text)
		if stopped {
			out.FinishReason = FinishStop
			stoppedByString = true
			break
		}
		if len(out.Tokens) >= maxTokens {
			break
		}
		sb := SeqBatch{Tokens: []int{res.Token}, Pos: pos, Blocks: blocks, NumLogits: 1}
		if logits, err = step(sb); err != nil {
			return nil, err
		}
	}
	if !stoppedByString {
		text, stopped := match.Push(dec.Flush())
		emit(text)
		if stopped {
			out.FinishReason = FinishStop
		} else {
			emit(match.Flush())
		}
	}
	out.DecodeTime = clk.Now().Sub(first)
	return out, nil
}
