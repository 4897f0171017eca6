package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// storiesWithGenConfig copies the built-in model's directory and gives it
// a generation_config.json.
func storiesWithGenConfig(t *testing.T, gen string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "stories260K")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(builtinDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(gen), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeGenerationConfig: a request that leaves sampling parameters
// out gets the model's generation_config.json values (vLLM's
// --generation-config auto), a request's own values win, vllm gives
// OpenAI's defaults, and --override-generation-config goes over the file.
func TestServeGenerationConfig(t *testing.T) {
	dir := storiesWithGenConfig(t, `{"bos_token_id": 1, "eos_token_id": 2, "temperature": 0.0, "repetition_penalty": 2.0}`)
	text := func(url, extra string) string {
		t.Helper()
		out := complete(t, url, `{"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 60`+extra+`}`)
		var r struct{ Choices []struct{ Text string } }
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("%s: %s", extra, out)
		}
		return r.Choices[0].Text
	}
	auto := startInProcess(t, "--model", dir)
	def, explicit, greedy := text(auto, ""), text(auto, `, "temperature": 0, "repetition_penalty": 2.0`), text(auto, `, "temperature": 0, "repetition_penalty": 1.0`)
	if def != explicit || def == greedy {
		t.Fatalf("defaults %q, explicit %q, plain greedy %q", def, explicit, greedy)
	}
	vllm := startInProcess(t, "--model", dir, "--generation-config", "vllm")
	if a, b := text(vllm, `, "seed": 5`), text(vllm, `, "seed": 5, "temperature": 1`); a != b || a == def {
		t.Fatalf("--generation-config vllm: %q, explicit temperature 1 %q (file's defaults %q)", a, b, def)
	}
	over := startInProcess(t, "--model", dir, "--override-generation-config", `{"repetition_penalty": 1.0}`)
	if got := text(over, ""); got != greedy {
		t.Fatalf("override: %q, want plain greedy %q", got, greedy)
	}
	for _, c := range []struct{ args, want string }{
		{"--generation-config /nonexistent", "no generation_config.json there"},
		{"--override-generation-config {\"temprature\":0}", `unknown field "temprature"`},
		{"--override-generation-config {\"temperature\":5}", "temperature must be in [0, 2], got 5"},
	} {
		_, stderr, err := runCLI(t, append([]string{"serve", "--device", "cpu", "--port", "0", "--model", dir}, strings.Fields(c.args)...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, c.want) {
			t.Errorf("%s: %v %s, want %q", c.args, err, stderr, c.want)
		}
	}
}
