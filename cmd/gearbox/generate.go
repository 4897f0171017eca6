package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/structured"
)

// generateResult is generate's --output json object.
type generateResult struct {
	Model                 string         `json:"model"`
	Text                  string         `json:"text"`
	TokenIDs              []int          `json:"token_ids"`
	PromptTokenIDs        []int          `json:"prompt_token_ids"`
	PromptTokens          int            `json:"prompt_tokens"`
	CompletionTokens      int            `json:"completion_tokens"`
	FinishReason          string         `json:"finish_reason"`
	TokensPerSecond       float64        `json:"tokens_per_second"`
	PromptTokensPerSecond float64        `json:"prompt_tokens_per_second"`
	ElapsedMS             float64        `json:"elapsed_ms"`
	Logprobs              []tokenLogprob `json:"logprobs,omitempty"`
	Plan                  string         `json:"plan"`
	Policy                string         `json:"policy"`
	Device                string         `json:"device"`
	PlanSteps             map[string]int `json:"plan_steps"`
	CommBytes             commReport     `json:"comm_bytes"`
	DraftTokens           int64          `json:"draft_tokens,omitempty"`    // speculative tokens verified
	AcceptedTokens        int64          `json:"accepted_tokens,omitempty"` // of those, the ones kept
}

// commReport is the bytes collectives moved, summed over ranks.
type commReport struct {
	Total  int64            `json:"total"`
	ByKind map[string]int64 `json:"by_kind"`
}

func commBytes(st comm.Stats) commReport {
	r := commReport{Total: st.Total().SentBytes, ByKind: map[string]int64{}}
	for k, c := range st {
		if c.SentBytes > 0 {
			r.ByKind[k.Kind.String()] += c.SentBytes
		}
	}
	return r
}

// tokenLogprob is one completion token's log-probability and its top
// alternatives, as generate --logprobs reports them.
type tokenLogprob struct {
	ID      int            `json:"id"`
	Token   string         `json:"token"`
	Logprob float64        `json:"logprob"`
	Top     []tokenLogprob `json:"top_logprobs,omitempty"`
}

// finiteLogprob clamps -Inf (a token the model rules out) to -9999, as vLLM
// does, because JSON has no infinities.
func finiteLogprob(x float32) float64 {
	return max(float64(x), -9999)
}

func logprobsJSON(tok interface{ Token(int) string }, results []sample.Result) []tokenLogprob {
	out := make([]tokenLogprob, len(results))
	for i, r := range results {
		out[i] = tokenLogprob{ID: r.Token, Token: tok.Token(r.Token), Logprob: finiteLogprob(r.Logprob)}
		for _, alt := range r.Top {
			out[i].Top = append(out[i].Top, tokenLogprob{ID: alt.Token, Token: tok.Token(alt.Token), Logprob: finiteLogprob(alt.Logprob)})
		}
	}
	return out
}

func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("generate", "generate [--model DIR] --prompt TEXT [flags]", stderr)
	modelDir := fs.String("model", "", "Hugging Face model directory (default: the built-in stories260K model)")
	prompt := fs.String("prompt", "", "prompt text")
	maxTokens := fs.Int("max-tokens", 256, "maximum completion tokens")
	temperature := fs.Float64("temperature", 0, "sampling temperature; 0 is greedy")
	topP := fs.Float64("top-p", 1, "nucleus sampling: keep the smallest set of tokens with this cumulative probability")
	topK := fs.Int("top-k", -1, "keep only the k most likely tokens; -1 disables")
	minP := fs.Float64("min-p", 0, "drop tokens less likely than min-p × the most likely token's probability")
	seed := fs.Int64("seed", -1, "random seed for sampling; -1 picks one")
	presence := fs.Float64("presence-penalty", 0, "OpenAI presence penalty over generated tokens")
	frequency := fs.Float64("frequency-penalty", 0, "OpenAI frequency penalty over generated tokens")
	repetition := fs.Float64("repetition-penalty", 1, "repetition penalty over prompt and generated tokens; 1 disables")
	logprobs := fs.Int("logprobs", -1, "report log-probabilities of the chosen token and this many alternatives; -1 disables")
	ignoreEOS := fs.Bool("ignore-eos", false, "keep generating after end-of-sequence tokens")
	var stops stringList
	fs.Var(&stops, "stop", "stop string (repeatable); the text ends before it")
	grammar := fs.String("grammar", "", "hold the text to this GBNF grammar (its rule root), as guided_grammar does")
	grammarFile := fs.String("grammar-file", "", "hold the text to the GBNF grammar in this file")
	jsonSchema := fs.String("json-schema", "", "hold the text to one JSON value this JSON Schema allows, as response_format json_schema does")
	output := fs.String("output", "text", "output format: text (streamed) or json")
	chunk := fs.Int("max-num-batched-tokens", 512, "prefill tokens per step")
	blockSize := fs.Int("block-size", 16, "KV cache block size in tokens")
	var spec specFlag
	addSpecFlag(fs, &spec)
	loraPath := fs.String("lora-path", "", "generate with this LoRA adapter (a PEFT directory) applied, on the CPU executor")
	maxRank := fs.Int("max-lora-rank", 0, "largest LoRA rank accepted (default: any)")
	par := addParallelFlags(fs)
	dev := addDeviceFlags(fs, "auto")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("generate: unexpected argument %q", fs.Arg(0))
	}
	if *output != "text" && *output != "json" {
		return fmt.Errorf("generate: --output must be text or json, got %q", *output)
	}
	if *prompt == "" {
		return fmt.Errorf("generate: --prompt is required")
	}
	params := sample.Params{
		Temperature: float32(*temperature), TopP: float32(*topP), TopK: *topK, MinP: float32(*minP),
		PresencePenalty: float32(*presence), FrequencyPenalty: float32(*frequency), RepetitionPenalty: float32(*repetition),
		Logprobs: *logprobs, Seed: *seed, HasSeed: *seed >= 0,
	}
	if err := params.Validate(); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	format, err := outputFormat(*grammar, *grammarFile, *jsonSchema)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}

	m, err := dev.loadModel(*modelDir, nil)
	if err != nil {
		return err
	}
	par.dtype, par.quant = dev.dtype, dev.quant
	plan, pol, err := par.resolve(m.Config)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if s, ok := pol.(*policy.SiDP); ok {
		s.Log = slog.New(slog.NewTextHandler(stderr, nil)) // its mode switches
	}
	rs := runnerSpec{placements: pol.Placements(), hostKVBytes: par.hostKVBytes(pol), blockSize: *blockSize, maxTokens: *chunk, maxSeqs: 1, sidpSlots: par.sidpSlotsFor(pol), csps: cspsPolicy(pol)}
	if *loraPath != "" {
		lf := loraFlags{enable: true, modules: loraModules{{name: "adapter", path: *loraPath}}, maxRank: *maxRank}
		if err := lf.check(par.policy, false); err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		if rs.adapters, err = lf.load(m.Config, []string{m.Name}, logger); err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		rs.lora = true
	}
	draft, err := spec.draftRunner(dev, rs, logger)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	run, err := dev.newRunner(m, rs, logger)
	if err != nil {
		draft.closeIfAny()
		return fmt.Errorf("generate: %w", err)
	}
	run = run.with(draft)
	defer run.close()
	if *output == "text" {
		fmt.Fprintf(stderr, "[device] %s\n", run.device)
	}
	eng, err := engine.NewEngine(engine.Options{
		Exec: run.runner, DraftRunner: run.draftRunner(), Policy: pol, Tokenizer: m.Tokenizer, EOS: m.EOS(), Clock: clock.Real{}, Speculative: spec.Config,
		Sched: sched.Config{MaxNumBatchedTokens: *chunk, MaxNumSeqs: 1},
	})
	if err != nil {
		return err
	}
	defer eng.Start()()
	ids := m.Tokenizer.Encode(*prompt, true)
	req := engine.Request{Prompt: ids, MaxTokens: *maxTokens, Sampling: params, Stop: stops, IgnoreEOS: *ignoreEOS, Adapter: len(rs.adapters)}
	if format != nil {
		req.Constraint = structured.TokenizerVocab(m.Tokenizer, m.EOS()).Matcher(format)
	}

	var onText func(string)
	if *output == "text" {
		fmt.Fprint(stdout, *prompt)
		onText = func(s string) { fmt.Fprint(stdout, s) }
	}
	start := time.Now()
	out, err := eng.Generate(ctx, req, onText)
	if err != nil {
		return err
	}
	stats := eng.Stats()
	planSteps := stats.PlanSteps
	elapsed := time.Since(start)
	decodeRate := 0.0
	if n := len(out.Tokens) - 1; n > 0 && out.DecodeTime > 0 {
		decodeRate = float64(n) / out.DecodeTime.Seconds()
	}
	prefillRate := 0.0
	if out.PrefillTime > 0 {
		prefillRate = float64(out.Usage.PromptTokens) / out.PrefillTime.Seconds()
	}
	if *output == "text" {
		fmt.Fprintln(stdout)
		fmt.Fprintf(stderr, "[%s] %d prompt tokens (%.0f tok/s), %d completion tokens (%.1f tok/s), finish reason %s; plan %s, policy %s, steps %v, %d comm bytes\n",
			m.Name, out.Usage.PromptTokens, prefillRate, len(out.Tokens), decodeRate, out.FinishReason, plan, pol, planSteps, run.commStats().Total().SentBytes)
		if stats.DraftTokens > 0 {
			fmt.Fprintf(stderr, "[speculative] %d of %d draft tokens accepted (%.0f%%)\n", stats.AcceptedTokens, stats.DraftTokens, 100*float64(stats.AcceptedTokens)/float64(stats.DraftTokens))
		}
		return nil
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(generateResult{
		Model: m.Name, Text: out.Text, TokenIDs: out.Tokens, PromptTokenIDs: ids,
		PromptTokens: out.Usage.PromptTokens, CompletionTokens: len(out.Tokens), FinishReason: out.FinishReason,
		TokensPerSecond: decodeRate, PromptTokensPerSecond: prefillRate,
		ElapsedMS: float64(elapsed.Microseconds()) / 1000, Logprobs: logprobsJSON(m.Tokenizer, out.Logprobs),
		Plan: plan.String(), Policy: pol.String(), Device: run.device, PlanSteps: planSteps, CommBytes: commBytes(run.commStats()),
		DraftTokens: stats.DraftTokens, AcceptedTokens: stats.AcceptedTokens,
	})
}

// outputFormat is the structured output format generate's --grammar,
// --grammar-file or --json-schema asks for (at most one); nil for none.
func outputFormat(grammar, grammarFile, schema string) (*structured.Format, error) {
	set := 0
	for _, v := range []string{grammar, grammarFile, schema} {
		if v != "" {
			set++
		}
	}
	switch {
	case set > 1:
		return nil, fmt.Errorf("--grammar, --grammar-file and --json-schema each set the output format; give one")
	case grammarFile != "":
		src, err := os.ReadFile(grammarFile)
		if err != nil {
			return nil, fmt.Errorf("--grammar-file: %w", err)
		}
		grammar = string(src)
		fallthrough
	case grammar != "":
		return structured.Grammar(grammar)
	case schema != "":
		return structured.JSONSchema([]byte(schema))
	}
	return nil, nil
}
