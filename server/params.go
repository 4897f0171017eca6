package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/structured"
)

// commonParams are the request fields completions and chat share. Pointers
// tell absent from zero.
type commonParams struct {
	Model             string          `json:"model"`
	MaxTokens         *int            `json:"max_tokens"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              *float64        `json:"min_p"`
	Seed              *int64          `json:"seed"`
	Stop              json.RawMessage `json:"stop"`
	StopTokenIDs      []int           `json:"stop_token_ids"`
	N                 *int            `json:"n"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	Stream            bool            `json:"stream"`
	StreamOptions     *streamOptions  `json:"stream_options"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	MinTokens         *int            `json:"min_tokens"`                 // vLLM's extra: no end token or stop string before this many tokens
	IncludeStopStr    bool            `json:"include_stop_str_in_output"` // vLLM's extra: keep the stop string that ended the text
	SkipSpecialTokens *bool           `json:"skip_special_tokens"`        // vLLM's extra: false keeps special tokens in the text
	PromptLogprobs    *int            `json:"prompt_logprobs"`            // vLLM's extra: the prompt tokens' log-probabilities, with this many top alternatives
	AllowedTokenIDs   []int           `json:"allowed_token_ids"`          // vLLM's extra: only these tokens may be generated
	BadWords          []string        `json:"bad_words"`                  // vLLM's extra: words that may not be generated
	UseBeamSearch     bool            `json:"use_beam_search"`            // vLLM's extra: n beams instead of n samples
	LengthPenalty     *float64        `json:"length_penalty"`             // vLLM's extra: beam scores divide by the length to this power (default 1)
	TruncatePrompt    *int            `json:"truncate_prompt_tokens"`     // vLLM's extra: keep the prompt's last N tokens (-1: as many as the context allows)
	TokensAsIDs       bool            `json:"return_tokens_as_token_ids"` // vLLM's extra: logprobs name tokens "token_id:N"
	Priority          int             `json:"priority"`
	User              string          `json:"user"`
	LogitBias         map[string]any  `json:"logit_bias"`
	BestOf            *int            `json:"best_of"`
	SLOTier           string          `json:"slo_tier"`        // Gearbox extension: the request's SLO tier (--slo-tiers)
	ResponseFormat    json.RawMessage `json:"response_format"` // structured output, on completions too as vLLM takes it
	GuidedJSON        json.RawMessage `json:"guided_json"`     // vLLM's extra: a JSON schema, or a string holding one
	GuidedChoice      []string        `json:"guided_choice"`   // vLLM's extra: the text is one of these
	GuidedRegex       *string         `json:"guided_regex"`    // vLLM's extra: the text matches this regex whole
	GuidedGrammar     *string         `json:"guided_grammar"`  // vLLM's extra: the text is derived by this GBNF grammar's root
	// StructuredOutputs is newer vLLM's one field for all of these:
	// {"json": …, "regex": …, "choice": […], "grammar": …, "json_object": true}.
	StructuredOutputs json.RawMessage `json:"structured_outputs"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsage (vLLM's continuous_usage_stats) puts each choice's
	// usage so far on every chunk.
	ContinuousUsage bool `json:"continuous_usage_stats"`
}

// Limits on request fields.
const (
	maxN        = 16
	maxLogprobs = 20
	maxStops    = 16
)

// generation is a validated request's sampling and stopping setup.
type generation struct {
	params    sample.Params
	maxTokens int // 0: the default for the endpoint
	stops     []string
	stopIDs   []int
	n         int
	ignoreEOS bool
	minTokens int  // min_tokens
	keepStop  bool // include_stop_str_in_output
	special   bool // special tokens stay in the text (skip_special_tokens false)
	priority  int
	tier      string             // SLO tier name, resolved against the server's tiers; "" without tiers
	format    *structured.Format // response_format json_object or json_schema; nil: free text
	// promptLogprobs asks for the prompt tokens' log-probabilities with
	// this many top alternatives each (echo with logprobs); -1 for none.
	promptLogprobs int
	badWords       []string // bad_words, tokenized at start
	truncate       int      // truncate_prompt_tokens: keep the prompt's last N tokens; 0: off, -1: the context's
	adapter        int      // the LoRA adapter the model names (resolveModel); 0: the base model
}

// truncation reads vLLM's truncate_prompt_tokens (nil: 0, off).
func truncation(t *int) (int, *apiError) {
	if t == nil {
		return 0, nil
	}
	if *t < -1 || *t == 0 {
		return 0, invalid("truncate_prompt_tokens", "truncate_prompt_tokens must be -1 (the context's) or at least 1, got %d", *t)
	}
	return *t, nil
}

// truncated is ids cut to their last keep tokens (truncate_prompt_tokens):
// keep -1 keeps as many as leave room for one token under limit, 0 all.
func truncated(ids []int, keep, limit int) []int {
	if keep == -1 {
		keep = limit - 1
	}
	if keep > 0 && len(ids) > keep {
		return ids[len(ids)-keep:]
	}
	return ids
}

// SamplingDefaults are the sampling parameters a request that leaves one
// out gets instead of OpenAI's default: the model's generation_config.json
// values, as vLLM's --generation-config auto applies them. Nil fields
// keep OpenAI's.
type SamplingDefaults struct {
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	TopK              *int     `json:"top_k,omitempty"`
	MinP              *float64 `json:"min_p,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
}

// Validate checks the defaults' ranges as a request's are checked.
func (d *SamplingDefaults) Validate() error {
	c := commonParams{Model: "defaults"}
	c.withDefaults(d)
	if _, e := c.validate(-1); e != nil {
		return errors.New(e.Message)
	}
	return nil
}

// withDefaults fills the sampling fields c leaves out from d (nil: none);
// validate then checks them as if the request had sent them.
func (c *commonParams) withDefaults(d *SamplingDefaults) {
	if d == nil {
		return
	}
	for _, f := range []struct{ dst, def **float64 }{{&c.Temperature, &d.Temperature}, {&c.TopP, &d.TopP}, {&c.MinP, &d.MinP}, {&c.RepetitionPenalty, &d.RepetitionPenalty}} {
		if *f.dst == nil {
			*f.dst = *f.def
		}
	}
	if c.TopK == nil {
		c.TopK = d.TopK
	}
}

// validate checks the shared fields; logprobs is the number of top
// alternatives requested (-1 for none).
func (c *commonParams) validate(logprobs int) (generation, *apiError) {
	g := generation{params: sample.DefaultParams(), n: 1, ignoreEOS: c.IgnoreEOS, priority: c.Priority, keepStop: c.IncludeStopStr,
		special: c.SkipSpecialTokens != nil && !*c.SkipSpecialTokens, promptLogprobs: -1}
	g.params.Logprobs = logprobs
	if c.Model == "" {
		return g, invalid("model", "model is required")
	}
	if c.PromptLogprobs != nil {
		if *c.PromptLogprobs < 0 || *c.PromptLogprobs > maxLogprobs {
			return g, invalid("prompt_logprobs", "prompt_logprobs must be in [0, %d], got %d", maxLogprobs, *c.PromptLogprobs)
		}
		g.promptLogprobs = *c.PromptLogprobs
	}
	g.params.AllowedTokenIDs = c.AllowedTokenIDs // checked by the sampler (sample.ErrAllowedTokenIDs)
	for _, w := range c.BadWords {
		if strings.TrimSpace(w) == "" {
			return g, invalid("bad_words", "a bad word is empty")
		}
	}
	g.badWords = c.BadWords
	truncate, e := truncation(c.TruncatePrompt)
	if e != nil {
		return g, e
	}
	g.truncate = truncate
	if c.MaxTokens != nil {
		if *c.MaxTokens < 1 {
			return g, invalid("max_tokens", "max_tokens must be at least 1, got %d", *c.MaxTokens)
		}
		g.maxTokens = *c.MaxTokens
	}
	floatIn := func(name string, v *float64, lo, hi float64, dst *float32) *apiError {
		if v == nil {
			return nil
		}
		if math.IsNaN(*v) || *v < lo || *v > hi {
			return invalid(name, "%s must be in [%g, %g], got %g", name, lo, hi, *v)
		}
		*dst = float32(*v)
		return nil
	}
	checks := []*apiError{
		floatIn("temperature", c.Temperature, 0, 2, &g.params.Temperature),
		floatIn("presence_penalty", c.PresencePenalty, -2, 2, &g.params.PresencePenalty),
		floatIn("frequency_penalty", c.FrequencyPenalty, -2, 2, &g.params.FrequencyPenalty),
		floatIn("min_p", c.MinP, 0, 1, &g.params.MinP),
	}
	for _, e := range checks {
		if e != nil {
			return g, e
		}
	}
	if c.TopP != nil {
		if !(*c.TopP > 0 && *c.TopP <= 1) {
			return g, invalid("top_p", "top_p must be in (0, 1], got %g", *c.TopP)
		}
		g.params.TopP = float32(*c.TopP)
	}
	if c.RepetitionPenalty != nil {
		if !(*c.RepetitionPenalty > 0 && *c.RepetitionPenalty <= 10) {
			return g, invalid("repetition_penalty", "repetition_penalty must be in (0, 10], got %g", *c.RepetitionPenalty)
		}
		g.params.RepetitionPenalty = float32(*c.RepetitionPenalty)
	}
	if c.TopK != nil {
		if *c.TopK < -1 {
			return g, invalid("top_k", "top_k must be -1 (off), 0 (off) or positive, got %d", *c.TopK)
		}
		g.params.TopK = *c.TopK
	}
	if c.Seed != nil {
		g.params.Seed, g.params.HasSeed = *c.Seed, true
	}
	if c.N != nil {
		if *c.N < 1 || *c.N > maxN {
			return g, invalid("n", "n must be in [1, %d], got %d", maxN, *c.N)
		}
		g.n = *c.N
	}
	if c.BestOf != nil && *c.BestOf != g.n {
		return g, invalid("best_of", "best_of is not supported (it must equal n)")
	}
	if len(c.LogitBias) > 0 {
		bias, e := parseLogitBias(c.LogitBias)
		if e != nil {
			return g, e
		}
		g.params.LogitBias = bias
	}
	if c.MinTokens != nil {
		if *c.MinTokens < 0 || c.MaxTokens != nil && *c.MinTokens > *c.MaxTokens {
			return g, invalid("min_tokens", "min_tokens must be in [0, max_tokens], got %d", *c.MinTokens)
		}
		g.minTokens = *c.MinTokens
	}
	format, e := c.structuredFormat()
	if e != nil {
		return g, e
	}
	g.format = format
	if c.StreamOptions != nil && !c.Stream {
		return g, invalid("stream_options", "stream_options is only allowed with stream: true")
	}
	stops, err := parseStop(c.Stop)
	if err != nil {
		return g, err
	}
	g.stops = stops
	g.stopIDs = c.StopTokenIDs
	if err := g.params.Validate(); err != nil {
		return g, invalid("", "%v", err)
	}
	return g, nil
}

// parseResponseFormat reads response_format: none, null or {"type":
// "text"} is plain text (nil); {"type": "json_object"} holds every choice
// to one JSON object (OpenAI's JSON mode) and {"type": "json_schema",
// "json_schema": {"name": …, "schema": {…}}} to a value its schema allows
// (package structured). Other types, a value that is not an object with a
// string "type", and a schema outside the supported subset are a 400.
func parseResponseFormat(raw json.RawMessage) (*structured.Format, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var rf map[string]json.RawMessage
	var typ string
	if json.Unmarshal(raw, &rf) != nil || len(rf["type"]) == 0 || rf["type"][0] != '"' || json.Unmarshal(rf["type"], &typ) != nil {
		return nil, invalid("response_format", `response_format must be an object with a string "type", such as {"type": "text"}`)
	}
	switch typ {
	case "text":
		return nil, nil
	case "json_object":
		return structured.JSONObject(), nil
	case "json_schema":
		var js struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		}
		if json.Unmarshal(rf["json_schema"], &js) != nil || len(js.Schema) == 0 {
			return nil, invalid("response_format", `response_format json_schema needs "json_schema": {"name": ..., "schema": {...}}`)
		}
		f, err := structured.JSONSchema(js.Schema)
		if err != nil {
			return nil, invalid("response_format", "response_format json_schema: %v", err)
		}
		return f, nil
	}
	return nil, invalid("response_format", `unknown response_format type %q; "text", "json_object" and "json_schema" are supported`, typ)
}

// structuredFormat reads the request's output format: response_format,
// vLLM's guided_json, guided_regex, guided_choice or guided_grammar, or
// newer vLLM's structured_outputs; more than one is a 400.
func (c *commonParams) structuredFormat() (*structured.Format, *apiError) {
	var formats []*structured.Format
	var names []string
	add := func(name string, f *structured.Format, e *apiError) *apiError {
		if e == nil && f != nil {
			formats, names = append(formats, f), append(names, name)
		}
		return e
	}
	f, e := parseResponseFormat(c.ResponseFormat)
	if e := add("response_format", f, e); e != nil {
		return nil, e
	}
	if len(c.GuidedJSON) > 0 && string(c.GuidedJSON) != "null" {
		f, e := jsonSchemaFormat("guided_json", c.GuidedJSON)
		if e := add("guided_json", f, e); e != nil {
			return nil, e
		}
	}
	if c.GuidedRegex != nil {
		f, e := regexFormat("guided_regex", *c.GuidedRegex)
		if e := add("guided_regex", f, e); e != nil {
			return nil, e
		}
	}
	if c.GuidedChoice != nil {
		f, e := choiceFormat("guided_choice", c.GuidedChoice)
		if e := add("guided_choice", f, e); e != nil {
			return nil, e
		}
	}
	if c.GuidedGrammar != nil {
		f, e := grammarFormat("guided_grammar", *c.GuidedGrammar)
		if e := add("guided_grammar", f, e); e != nil {
			return nil, e
		}
	}
	if len(c.StructuredOutputs) > 0 && string(c.StructuredOutputs) != "null" {
		f, e := parseStructuredOutputs(c.StructuredOutputs)
		if e := add("structured_outputs", f, e); e != nil {
			return nil, e
		}
	}
	if len(formats) > 1 {
		return nil, invalid(names[1], "%s and %s both set the output format; send one", names[0], names[1])
	}
	if len(formats) == 0 {
		return nil, nil
	}
	return formats[0], nil
}

// parseStructuredOutputs reads vLLM's structured_outputs: one of json (a
// schema, or a string holding one), regex, choice, grammar or
// json_object, and disable_any_whitespace.
func parseStructuredOutputs(raw json.RawMessage) (*structured.Format, *apiError) {
	const param = "structured_outputs"
	var so map[string]json.RawMessage
	if json.Unmarshal(raw, &so) != nil {
		return nil, invalid(param, `structured_outputs must be an object such as {"json": {...}}, {"regex": "..."}, {"choice": [...]}, {"grammar": "..."} or {"json_object": true}`)
	}
	var set []string
	var format *structured.Format
	compact := false
	for key, v := range so {
		if string(v) == "null" || string(v) == "false" && (key == "json_object" || key == "disable_any_whitespace") {
			continue
		}
		if key == "disable_any_whitespace" {
			if string(v) != "true" {
				return nil, invalid(param, "structured_outputs.disable_any_whitespace must be a boolean")
			}
			compact = true
			continue
		}
		var f *structured.Format
		var e *apiError
		switch key {
		case "json":
			f, e = jsonSchemaFormat(param, v)
		case "regex":
			var re string
			if json.Unmarshal(v, &re) != nil {
				return nil, invalid(param, "structured_outputs.regex must be a string")
			}
			f, e = regexFormat(param, re)
		case "choice":
			var options []string
			if json.Unmarshal(v, &options) != nil {
				return nil, invalid(param, "structured_outputs.choice must be a list of strings")
			}
			f, e = choiceFormat(param, options)
		case "grammar":
			var src string
			if json.Unmarshal(v, &src) != nil {
				return nil, invalid(param, "structured_outputs.grammar must be a string (a GBNF grammar)")
			}
			f, e = grammarFormat(param, src)
		case "json_object":
			if string(v) != "true" {
				return nil, invalid(param, "structured_outputs.json_object must be a boolean")
			}
			f = structured.JSONObject()
		default:
			return nil, invalid(param, "structured_outputs.%s is not supported; json, regex, choice, grammar, json_object and disable_any_whitespace are", key)
		}
		if e != nil {
			return nil, e
		}
		set, format = append(set, key), f
	}
	if len(set) != 1 {
		return nil, invalid(param, "structured_outputs must set exactly one of json, regex, choice, grammar and json_object, got %d", len(set))
	}
	if compact {
		format = format.WithoutWhitespace()
	}
	return format, nil
}

// jsonSchemaFormat compiles a schema sent as an object or as a string
// holding one.
func jsonSchemaFormat(param string, raw json.RawMessage) (*structured.Format, *apiError) {
	schema := []byte(raw)
	var text string
	if json.Unmarshal(schema, &text) == nil {
		schema = []byte(text)
	}
	f, err := structured.JSONSchema(schema)
	if err != nil {
		return nil, invalid(param, "%s: %v", param, err)
	}
	return f, nil
}

func regexFormat(param, pattern string) (*structured.Format, *apiError) {
	f, err := structured.Regex(pattern)
	if err != nil {
		return nil, invalid(param, "%s: %v", param, err)
	}
	return f, nil
}

func grammarFormat(param, src string) (*structured.Format, *apiError) {
	f, err := structured.Grammar(src)
	if err != nil {
		return nil, invalid(param, "%s: %v", param, err)
	}
	return f, nil
}

func choiceFormat(param string, options []string) (*structured.Format, *apiError) {
	f, err := structured.Choice(options)
	if err != nil {
		return nil, invalid(param, "%s: %v", param, err)
	}
	return f, nil
}

// parseLogitBias reads OpenAI's logit_bias: token ids (as JSON object
// keys, so strings) to biases in [-100, 100]. Ids outside the vocabulary
// are refused when the request is submitted (sample.New).
func parseLogitBias(m map[string]any) (map[int]float32, *apiError) {
	out := make(map[int]float32, len(m))
	for key, v := range m {
		tok, err := strconv.Atoi(key)
		if err != nil || tok < 0 {
			return nil, invalid("logit_bias", "logit_bias keys must be token ids (non-negative integers), got %q", key)
		}
		b, ok := v.(float64)
		if !ok || !(b >= -sample.MaxLogitBias && b <= sample.MaxLogitBias) {
			return nil, invalid("logit_bias", "logit_bias values must be numbers in [%d, %d], got %v for token %d", -sample.MaxLogitBias, sample.MaxLogitBias, v, tok)
		}
		out[tok] = float32(b)
	}
	return out, nil
}

// parseStop accepts null, a string or a list of strings.
func parseStop(raw json.RawMessage) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, invalid("stop", "stop must be a string or a list of strings")
	}
	if len(many) > maxStops {
		return nil, invalid("stop", "at most %d stop sequences are allowed, got %d", maxStops, len(many))
	}
	out := many[:0]
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// decodeError turns a JSON decoding error into a 400 naming the field.
func decodeError(err error) *apiError {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := strings.TrimPrefix(typeErr.Field, "commonParams.")
		if field == "" {
			return invalid("", "the request body must be a JSON object, not %s", typeErr.Value)
		}
		return invalid(field, "%s must be %s, got %s", field, goTypeName(typeErr.Type.String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return invalid("", "invalid JSON at byte %d: %v", syntaxErr.Offset, err)
	}
	return invalid("", "invalid JSON: %v", err)
}

func goTypeName(t string) string {
	switch {
	case strings.Contains(t, "int"):
		return "an integer"
	case strings.Contains(t, "float"):
		return "a number"
	case t == "string" || t == "*string":
		return "a string"
	case strings.Contains(t, "bool"):
		return "a boolean"
	case strings.HasPrefix(t, "[]") || strings.HasPrefix(t, "*[]"):
		return "an array"
	}
	return fmt.Sprintf("a %s", strings.TrimPrefix(t, "*"))
}

// TierHeader is the header a request may name its SLO tier in instead of
// the slo_tier field, for gateways that route on headers.
const TierHeader = "X-SLO-Tier"

// resolveTier returns the SLO tier a request names in its slo_tier field
// (field) or its X-SLO-Tier header: the tier's name, the default tier's
// when it names none, "" when the server has no default or no tiers.
func (s *Server) resolveTier(r *http.Request, field string) (string, *apiError) {
	name := field
	if header := strings.TrimSpace(r.Header.Get(TierHeader)); header != "" {
		if field != "" && field != header {
			return "", invalid("slo_tier", "the slo_tier field %q and the %s header %q name different tiers", field, TierHeader, header)
		}
		name = header
	}
	if s.opts.Tiers == nil {
		if name != "" {
			return "", invalid("slo_tier", "SLO tier %q requested, but this server defines no tiers (start it with --slo-tiers FILE)", name)
		}
		return "", nil
	}
	i, err := s.opts.Tiers.Resolve(name)
	if err != nil {
		return "", invalid("slo_tier", "%v", err)
	}
	if i < 0 {
		return "", nil
	}
	return s.opts.Tiers.At(i).Name, nil
}
