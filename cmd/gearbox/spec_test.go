package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestServeSpeculative serves the builtin model with and without n-gram
// drafts: completions are the same, and /metrics counts the drafts.
func TestServeSpeculative(t *testing.T) {
	plain := startInProcess(t)
	spec := startInProcess(t, "--speculative-config", `{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}`)
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
	if got := scrape(t, spec, "gearbox:generation_tokens_total"); int(got) != completions {
		t.Fatalf("server counted %v generated tokens, the completions %d", got, completions)
	}
	t.Logf("%v of %v draft tokens accepted", accepted, drafted)
	if scrape(t, plain, "gearbox:spec_decode_num_draft_tokens_total") != 0 {
		t.Fatal("drafts without --speculative-config")
	}
	_, stderr, err := runCLI(t, "serve", "--speculative-config", `{"method": "eagle3", "num_speculative_tokens": 2}`)
	if err == nil || !strings.Contains(err.Error()+stderr, `method "eagle3" is not supported`) {
		t.Fatalf("bad config: %v %s", err, stderr)
	}
}

// TestGenerateSpeculative: generate with drafts gives the plain tokens and
// reports the drafts.
func TestGenerateSpeculative(t *testing.T) {
	args := []string{"generate", "--prompt", "Lily and Ben went to the park. Lily and Ben", "--max-tokens", "40", "--output", "json"}
	var plain, spec generateResult
	for _, r := range []struct {
		res   *generateResult
		extra []string
	}{{&plain, nil}, {&spec, []string{"--speculative-config", `{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2}`}}} {
		out, _, err := runCLI(t, append(args, r.extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out), r.res); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(spec.TokenIDs, plain.TokenIDs) || spec.Text != plain.Text {
		t.Fatalf("speculative %v, plain %v", spec.TokenIDs, plain.TokenIDs)
	}
	if plain.DraftTokens != 0 || spec.DraftTokens == 0 || spec.AcceptedTokens == 0 {
		t.Fatalf("drafts: plain %d, speculative %d (%d accepted)", plain.DraftTokens, spec.DraftTokens, spec.AcceptedTokens)
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
}
