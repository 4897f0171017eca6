package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// builtinDir is the builtin model's directory in the repository, a draft
// model for itself.
const builtinDir = "../../model/builtin/stories260K"

// specConfigs are a --speculative-config of each method.
var specConfigs = []string{
	`{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}`,
	`{"method": "draft_model", "model": "` + builtinDir + `", "num_speculative_tokens": 4}`,
}

// TestServeSpeculative serves the builtin model with and without drafts,
// n-gram and from a draft model: completions are the same, and /metrics
// counts the drafts.
func TestServeSpeculative(t *testing.T) {
	plain := startInProcess(t)
	for _, config := range specConfigs {
		t.Run(config, func(t *testing.T) { testServeSpeculative(t, plain, startInProcess(t, "--speculative-config", config)) })
	}
	for config, want := range map[string]string{
		`{"method": "eagle3", "num_speculative_tokens": 2}`:                               `method "eagle3" is not supported`,
		`{"method": "draft_model", "model": "/nonexistent", "num_speculative_tokens": 2}`: `draft model: `,
	} {
		_, stderr, err := runCLI(t, "serve", "--speculative-config", config)
		if err == nil || !strings.Contains(err.Error()+stderr, want) {
			t.Fatalf("%s: %v %s", config, err, stderr)
		}
	}
	_, stderr, err := runCLI(t, "serve", "--policy", "nitsum", "--plan", "tp=2", "--slo-tiers", "../../examples/slo-tiers/qwen-14b-h100.json", "--speculative-config", specConfigs[1])
	if err == nil || !strings.Contains(err.Error()+stderr, `"draft_model" is not supported under nitsum`) {
		t.Fatalf("nitsum with a draft model: %v %s", err, stderr)
	}
}

func testServeSpeculative(t *testing.T, plain, spec string) {
	type result struct {
		Choices []struct{ Text string }
		Usage   struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	completions := 0
	for _, body := range []string{
		`{"model": "stories260K", "prompt": "Lily and Ben went to the park. Lily and Ben", "max_tokens": 60, "temperature": 0}`,
		`{"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 50, "temperature": 0.8, "seed": 3, "logprobs": 2}`,
		// The constraint follows each kept draft before the next row is
		// masked.
		`{"model": "stories260K", "prompt": "Lily and Ben", "max_tokens": 40, "temperature": 0, "guided_regex": "( (Lily|and|Ben|went|to|the|park)[.,]?){1,30}"}`,
	} {
		var want, got result
		for url, r := range map[string]*result{plain: &want, spec: &got} {
			out := complete(t, url, body)
			if err := json.Unmarshal([]byte(out), r); err != nil || len(r.Choices) != 1 {
				t.Fatalf("%s: %v", out, err)
			}
		}
		if got.Choices[0].Text != want.Choices[0].Text || got.Usage != want.Usage {
			t.Fatalf("%s:\nspeculative %q (%+v)\nplain       %q (%+v)", body, got.Choices[0].Text, got.Usage, want.Choices[0].Text, want.Usage)
		}
		completions += got.Usage.CompletionTokens
	}
	drafted, accepted := scrape(t, spec, "gearbox:spec_decode_num_draft_tokens_total"), scrape(t, spec, "gearbox:spec_decode_num_accepted_tokens_total")
	if accepted == 0 || accepted > drafted || scrape(t, spec, "gearbox:spec_decode_num_drafts_total") == 0 {
		t.Fatalf("%v of %v drafts accepted", accepted, drafted)
	}
	// Per position: they sum to the accepted drafts, and a draft is kept
	// only after the ones before it were.
	perPos, last := 0.0, math.Inf(1)
	for p := range 4 {
		n := scrape(t, spec, fmt.Sprintf(`gearbox:spec_decode_num_accepted_tokens_per_pos{position="%d"}`, p))
		if n > last {
			t.Fatalf("position %d kept %v drafts, position %d %v", p, n, p-1, last)
		}
		perPos, last = perPos+n, n
	}
	if perPos != accepted {
		t.Fatalf("%v accepted by position, %v in all", perPos, accepted)
	}
	if got := scrape(t, spec, "gearbox:generation_tokens_total"); int(got) != completions {
		t.Fatalf("server counted %v generated tokens, the completions %d", got, completions)
	}
	t.Logf("%v of %v draft tokens accepted", accepted, drafted)
	if scrape(t, plain, "gearbox:spec_decode_num_draft_tokens_total") != 0 {
		t.Fatal("drafts without --speculative-config")
	}
}

// TestGenerateSpeculative: generate with drafts gives the plain tokens and
// reports the drafts.
func TestGenerateSpeculative(t *testing.T) {
	args := []string{"generate", "--prompt", "Lily and Ben went to the park. Lily and Ben", "--max-tokens", "40", "--output", "json"}
	var plain generateResult
	for _, extra := range append([]string{""}, specConfigs...) {
		var spec generateResult
		r := &spec
		cmd := args
		if extra == "" {
			r = &plain
		} else {
			cmd = append(slices.Clip(args), "--speculative-config", extra)
		}
		out, _, err := runCLI(t, cmd...)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out), r); err != nil {
			t.Fatal(err)
		}
		if extra == "" {
			continue
		}
		if !slices.Equal(spec.TokenIDs, plain.TokenIDs) || spec.Text != plain.Text {
			t.Fatalf("%s: speculative %v, plain %v", extra, spec.TokenIDs, plain.TokenIDs)
		}
		if plain.DraftTokens != 0 || spec.DraftTokens == 0 || spec.AcceptedTokens == 0 {
			t.Fatalf("%s: drafts: plain %d, speculative %d (%d accepted)", extra, plain.DraftTokens, spec.DraftTokens, spec.AcceptedTokens)
		}
	}
}

// TestSimulateSpeculative: simulate models drafts at the acceptance rate
// it is given, and asks for one.
func TestSimulateSpeculative(t *testing.T) {
	args := []string{"simulate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--hardware", "1xH200", "--plan", "tp=1", "--dataset", "synthetic:in=512,out=128,n=8",
		"--speculative-config", `{"method": "ngram", "num_speculative_tokens": 4}`}
	_, stderr, err := runCLI(t, append(args, "--speculative-acceptance", "0.7")...)
	if err != nil {
		t.Fatal(err)
	}
	var kept, drafted int
	if _, err := fmt.Sscanf(stderr[strings.Index(stderr, "speculative decoding:"):], "speculative decoding: %d of %d draft tokens kept", &kept, &drafted); err != nil || kept == 0 || kept >= drafted {
		t.Fatalf("stderr %q: %v", stderr, err)
	}
	for extra, want := range map[string]string{
		"":                           "needs --speculative-acceptance in [0, 1)",
		"--speculative-acceptance 1": "needs --speculative-acceptance in [0, 1)",
		"--policy csps --speculative-acceptance 0.5": "not modelled under --policy csps",
	} {
		_, stderr, err := runCLI(t, append(args, strings.Fields(extra)...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, want) {
			t.Errorf("%q: %v, want %q", extra, err, want)
		}
	}
	// A draft model's steps are priced beside the target's.
	draft := []string{"--speculative-acceptance", "0.7", "--speculative-config", `{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4}`}
	_, stderr, err = runCLI(t, append(args, draft...)...)
	var steps int
	var seconds float64
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(stderr[strings.Index(stderr, "draft model:"):], "draft model: %d steps, %f s of the run", &steps, &seconds); err != nil || steps == 0 || seconds <= 0 {
		t.Fatalf("stderr %q: %v", stderr, err)
	}
	draft[3] = `{"model": "meta-llama/Llama-2-7b-hf", "num_speculative_tokens": 4}`
	if _, stderr, err := runCLI(t, append(args, draft...)...); err == nil || !strings.Contains(err.Error()+stderr, "vocabulary") {
		t.Errorf("a draft of another vocabulary: %v %s", err, stderr)
	}
}
