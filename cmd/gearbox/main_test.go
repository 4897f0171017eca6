package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/internal/fixture"
)

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestGenerateJSON(t *testing.T) {
	out, _, err := runCLI(t, "generate", "--prompt", "Once upon a time", "--max-tokens", "16", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var res generateResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bad JSON %q: %v", out, err)
	}
	want := []int{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}
	if len(res.TokenIDs) != 16 || res.TokenIDs[0] != want[0] || res.TokenIDs[15] != want[15] {
		t.Fatalf("token_ids = %v, want %v", res.TokenIDs, want)
	}
	if res.Text != ", there was a little girl named Lily. She loved to play" || res.FinishReason != "length" ||
		res.PromptTokens != 5 || res.CompletionTokens != 16 || res.TokensPerSecond <= 0 {
		t.Fatalf("result = %+v", res)
	}
}

// TestGenerateFormats: --grammar, --grammar-file and --json-schema hold
// the text to the format; two at once, or a bad one, are errors.
func TestGenerateFormats(t *testing.T) {
	file := filepath.Join(t.TempDir(), "name.gbnf")
	if err := os.WriteFile(file, []byte("# a name\nroot ::= \" named \" [A-Z] [a-z]{2,6} \".\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--grammar", `root ::= ", there was a " ("dog" | "cat") "."`}, `^, there was a (dog|cat)\.$`},
		{[]string{"--grammar-file", file}, `^ named [A-Z][a-z]{2,6}\.$`},
		{[]string{"--json-schema", `{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":9}},"required":["n"]}`, "--max-tokens", "60"}, `^\s*\{\s*"n"\s*:\s*[1-9]\s*\}\s*$`},
	} {
		out, _, err := runCLI(t, append([]string{"generate", "--prompt", "Once upon a time", "--max-tokens", "30", "--output", "json"}, c.args...)...)
		var res generateResult
		if err != nil || json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("%v: %v %s", c.args, err, out)
		}
		if !regexp.MustCompile(c.want).MatchString(res.Text) || res.FinishReason != "stop" {
			t.Errorf("%v: %q (%s), want %s", c.args, res.Text, res.FinishReason, c.want)
		}
	}
	for _, args := range [][]string{
		{"--grammar", "root ::= x"},
		{"--grammar", `root ::= "a"`, "--json-schema", "{}"},
		{"--grammar-file", filepath.Join(t.TempDir(), "missing")},
		{"--json-schema", `{"type":"object","multipleOf":3}`},
	} {
		if _, _, err := runCLI(t, append([]string{"generate", "--prompt", "x"}, args...)...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestGenerateText(t *testing.T) {
	out, stderr, err := runCLI(t, "generate", "--prompt", "Once upon a time", "--max-tokens", "20", "--stop", "Lily")
	if err != nil {
		t.Fatal(err)
	}
	if out != "Once upon a time, there was a little girl named \n" {
		t.Fatalf("stdout = %q", out)
	}
	if !strings.Contains(stderr, "finish reason stop") {
		t.Fatalf("stderr = %q", stderr)
	}
}

func TestGenerateFixtureModel(t *testing.T) {
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{ModelType: "qwen3", Heads: 8, KVHeads: 4, HeadDim: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "generate", "--model", dir, "--prompt", "the hat", "--max-tokens", "10", "--temperature", "0.8", "--seed", "7", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var a generateResult
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.CompletionTokens == 0 {
		t.Fatalf("bad result %q: %v", out, err)
	}
	again, _, _ := runCLI(t, "generate", "--model", dir, "--prompt", "the hat", "--max-tokens", "10", "--temperature", "0.8", "--seed", "7", "--output", "json")
	var b generateResult
	json.Unmarshal([]byte(again), &b)
	if a.Text != b.Text || len(a.TokenIDs) != len(b.TokenIDs) {
		t.Fatalf("seeded sampling differs: %q vs %q", a.Text, b.Text)
	}
	info, _, err := runCLI(t, "inspect", "--model", dir, "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var ir inspectResult
	if err := json.Unmarshal([]byte(info), &ir); err != nil {
		t.Fatal(err)
	}
	if ir.ModelType != "qwen3" || ir.HeadDim != 16 || ir.KVBytesPerTokenF != 2*2*4*16*4 || ir.BytesPerDtype["F32"] != 4*ir.Parameters {
		t.Fatalf("inspect = %+v", ir)
	}
}

func TestCLIErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"generate"}, "--prompt is required"},
		{[]string{"generate", "--prompt", "x", "--top-p", "1.5"}, "top_p"},
		{[]string{"generate", "--prompt", "x", "--output", "xml"}, "--output must be text or json"},
		{[]string{"generate", "--prompt", "x", "--model", os.DevNull}, "not a directory"},
		{[]string{"generate", "--prompt", "x", "--model", "/nonexistent/model"}, "no such file"},
		{[]string{"generate", "--bogus"}, "flag provided but not defined"},
		{[]string{"inspect", "--model", "/nonexistent/model"}, "no such file"},
	}
	for _, tc := range cases {
		_, stderr, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error()+stderr, tc.want) {
			t.Errorf("%v: err = %v (stderr %q), want %q", tc.args, err, stderr, tc.want)
		}
	}
}

func TestParallelFlags(t *testing.T) {
	out, _, err := runCLI(t, "generate", "--prompt", "Once upon a time", "--max-tokens", "16", "--output", "json",
		"--ulysses-sequence-parallel-size", "4", "--tensor-parallel-size", "2", "--enable-shift-parallel", "--shift-parallel-threshold", "3")
	if err != nil {
		t.Fatal(err)
	}
	var res generateResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	// The 5-token prompt runs under the base plan (above the threshold of
	// 3 tokens), the decodes under the shift plan, and the text is the
	// single-rank text.
	if res.Text != ", there was a little girl named Lily. She loved to play" || res.Plan != "sp=4,tp=2" || res.Policy != "shift" ||
		res.PlanSteps["sp=4,tp=2"] != 1 || res.PlanSteps["tp=8"] != 15 || res.CommBytes.ByKind["all_to_all"] == 0 {
		t.Fatalf("result = %+v", res)
	}
	info, _, err := runCLI(t, "inspect", "--plan", "sp=2,tp=2", "--policy", "shift", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var ir inspectResult
	if err := json.Unmarshal([]byte(info), &ir); err != nil {
		t.Fatal(err)
	}
	if len(ir.Ranks) != 4 || ir.Ranks[1].HeadChunk != 2 || ir.Ranks[0].ShiftWeightBytes == 0 || ir.Ranks[0].KVBytesPerToken != 5*2*1*8*4 {
		t.Fatalf("inspect ranks = %+v", ir.Ranks)
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--plan", "sp=3"}, "must divide the 8 attention heads"},
		{[]string{"--plan", "tp=2", "--tensor-parallel-size", "4"}, "disagrees with tp=2"},
		{[]string{"--plan", "tp=2", "--policy", "shift"}, "no sequence parallelism"},
		{[]string{"--policy", "fancy"}, `unknown --policy "fancy"`},
		{[]string{"--plan", "sp=2", "--shift-threshold", "9"}, "--shift-threshold needs --policy shift"},
		{[]string{"--plan", "sp=2", "--policy", "static", "--enable-shift-parallel"}, "conflicts with --policy static"},
		{[]string{"--plan", "sp=2", "--policy", "shift", "--shift-threshold", "1", "--shift-parallel-threshold", "2"}, "disagrees with --shift-threshold=1"},
		{[]string{"--pipeline-parallel-size", "9"}, "exceeds the 5 layers"},
		{[]string{"--data-parallel-size", "0"}, "must be at least 1"},
	}
	for _, b := range bad {
		args := append([]string{"generate", "--prompt", "x"}, b.args...)
		if _, _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%v: err %v, want %q", b.args, err, b.want)
		}
	}
}

// TestGenerateSeesaw: the built-in model under --policy seesaw prefills
// under pp=2 and decodes under tp=2, with the single rank's tokens; bad
// seesaw flags are refused with the flag to fix.
func TestGenerateSeesaw(t *testing.T) {
	out, _, err := runCLI(t, "generate", "--prompt", "Once upon a time", "--max-tokens", "16", "--output", "json",
		"--policy", "seesaw", "--prefill-plan", "pp=2", "--decode-plan", "tp=2", "--swap-space", "0.01")
	if err != nil {
		t.Fatal(err)
	}
	var res generateResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bad JSON %q: %v", out, err)
	}
	if res.Text != ", there was a little girl named Lily. She loved to play" || res.Policy != "seesaw" ||
		res.PlanSteps["pp=2"] != 1 || res.PlanSteps["tp=2"] != 15 {
		t.Fatalf("result = %+v", res)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "seesaw", "--prefill-plan", "pp=2"}, "--decode-plan"},
		{[]string{"--policy", "seesaw", "--prefill-plan", "pp=2", "--decode-plan", "tp=4"}, "same ranks"},
		{[]string{"--policy", "seesaw", "--prefill-plan", "sp=2", "--decode-plan", "tp=2"}, "sequence parallelism"},
		{[]string{"--policy", "seesaw", "--prefill-plan", "pp=2", "--decode-plan", "tp=2", "--plan", "tp=2"}, "not --plan"},
		{[]string{"--policy", "seesaw", "--prefill-plan", "pp=2", "--decode-plan", "tp=2", "--swap-space", "0"}, "--swap-space"},
		{[]string{"--prefill-plan", "pp=2"}, "need --policy seesaw"},
	} {
		_, _, err := runCLI(t, append([]string{"generate", "--prompt", "x"}, bad.args...)...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error naming %q", bad.args, err, bad.want)
		}
	}
}

// TestServeSLOTiersFile: a malformed --slo-tiers file stops serve before
// it loads the model, with the file's error naming the tier and field.
func TestServeSLOTiersFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiers.json")
	if err := os.WriteFile(path, []byte(`[{"name":"strict","ttft_ms":300,"tpot_ms":-5}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCLI(t, "serve", "--port", "0", "--slo-tiers", path)
	if err == nil || !strings.Contains(err.Error(), "--slo-tiers") || !strings.Contains(err.Error(), "tpot_ms") {
		t.Fatalf("serve with a bad tiers file: %v", err)
	}
	_, _, err = runCLI(t, "serve", "--port", "0", "--slo-tiers", filepath.Join(t.TempDir(), "missing.json"))
	if err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("serve with a missing tiers file: %v", err)
	}
}
