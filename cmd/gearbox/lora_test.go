package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/internal/fixture"
)

// storiesLoRA writes a random LoRA adapter for the built-in model (the
// shapes of model/builtin/stories260K/config.json) into a new directory.
func storiesLoRA(t *testing.T, l fixture.LoRA) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), fmt.Sprint("adapter-", l.Seed))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := fixture.Spec{Hidden: 64, Intermediate: 172, Layers: 5, Heads: 8, KVHeads: 4, Vocab: 512}
	if err := fixture.WriteLoRA(dir, spec, l); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeLoRA serves the built-in model with two LoRA adapters:
// /v1/models lists them under the model, a completion naming one is
// generate --lora-path's with that adapter and not the base model's,
// chat and embeddings take them, and an unknown name is a 404. The flags'
// errors are clear.
func TestServeLoRA(t *testing.T) {
	one := storiesLoRA(t, fixture.LoRA{Rank: 8, Seed: 1})
	two := storiesLoRA(t, fixture.LoRA{Rank: 4, Modules: []string{"self_attn.q_proj", "self_attn.v_proj"}, Seed: 2})
	url := startInProcess(t, "--enable-lora", "--lora-modules", "one="+one, "--lora-modules", `{"name": "two", "path": "`+two+`"}`)

	models, code := get(t, url+"/v1/models")
	var list struct {
		Data []struct{ ID, Root, Parent string }
	}
	if err := json.Unmarshal([]byte(models), &list); err != nil || code != 200 || len(list.Data) != 3 ||
		list.Data[1].ID != "one" || list.Data[1].Root != one || list.Data[1].Parent != "stories260K" || list.Data[2].ID != "two" || list.Data[0].Parent != "" {
		t.Fatalf("/v1/models: %d %s", code, models)
	}
	text := func(model string) string {
		out := complete(t, url, `{"model": "`+model+`", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}`)
		var r struct{ Choices []struct{ Text string } }
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("%s: %s", model, out)
		}
		return r.Choices[0].Text
	}
	base, withOne, withTwo := text("stories260K"), text("one"), text("two")
	if base != storiesText || withOne == base || withTwo == base || withOne == withTwo {
		t.Fatalf("base %q, one %q, two %q", base, withOne, withTwo)
	}
	var gen generateResult
	out, _, err := runCLI(t, "generate", "--device", "cpu", "--prompt", "Once upon a time", "--max-tokens", "16", "--output", "json", "--lora-path", one)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &gen); err != nil || gen.Text != withOne {
		t.Fatalf("generate --lora-path: %q (%v), served %q", gen.Text, err, withOne)
	}
	if out := complete(t, url, `{"model": "three", "prompt": "Once", "max_tokens": 2}`); !strings.Contains(out, "model_not_found") && !strings.Contains(out, "does not exist") {
		t.Fatalf("unknown adapter: %s", out)
	}
	resp, code := post(t, url+"/v1/chat/completions", `{"model": "one", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}`)
	if code != 200 && !strings.Contains(resp, "chat template") {
		t.Fatalf("chat with an adapter: %d %s", code, resp)
	}
	embed := func(model string) []float64 {
		resp, code := post(t, url+"/v1/embeddings", `{"model": "`+model+`", "input": "Once upon a time"}`)
		var r struct {
			Data []struct{ Embedding []float64 }
		}
		if err := json.Unmarshal([]byte(resp), &r); err != nil || code != 200 || len(r.Data) != 1 {
			t.Fatalf("embeddings of %s: %d %s", model, code, resp)
		}
		return r.Data[0].Embedding
	}
	if e0, e1 := embed("stories260K"), embed("one"); fmt.Sprint(e0) == fmt.Sprint(e1) {
		t.Fatal("the adapter does not change the embedding")
	}
	if v := scrape(t, url, `vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""}`); v < 1e9 {
		t.Fatalf("vllm:lora_requests_info = %v, want the scrape's Unix time", v)
	}
	// bench serve --lora-modules: every request names one of the
	// adapters (a name the server lacks fails some).
	for _, c := range []struct {
		names  []string
		failed bool
	}{{[]string{"one", "two"}, false}, {[]string{"one", "three"}, true}} {
		rep, err := bench.Serve(context.Background(), bench.ServeConfig{
			Options: bench.Options{BaseURL: url, Model: "stories260K", LoRAModules: c.names, MaxConcurrency: 4, IgnoreEOS: true, Seed: 1},
			Dataset: "synthetic:in=8,out=4", MaxRequests: 16,
		}, io.Discard, io.Discard)
		if err != nil || rep.Completed+rep.Failed != 16 || (rep.Failed > 0) != c.failed {
			t.Fatalf("bench serve over %v: %v, %d completed, %d failed", c.names, err, rep.Completed, rep.Failed)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--lora-modules", "one=" + one}, "--lora-modules needs --enable-lora"},
		{[]string{"--enable-lora", "--lora-modules", "stories260K=" + one}, `the name "stories260K" is taken`},
		{[]string{"--enable-lora", "--lora-modules", "one=" + one + " one=" + two}, `the name "one" is taken`},
		{[]string{"--enable-lora", "--lora-modules", "one"}, "want name=path"},
		{[]string{"--enable-lora", "--lora-modules", "one=" + one, "--max-lora-rank", "4"}, "rank 8, above --max-lora-rank 4"},
		{[]string{"--enable-lora", "--lora-modules", "x=/nonexistent"}, "adapter_config.json"},
		{[]string{"--enable-lora", "--policy", "sidp", "--plan", "dp=2"}, "--policy sidp does not run LoRA adapters"},
	} {
		_, stderr, err := runCLI(t, append([]string{"serve", "--device", "cpu", "--port", "0"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, c.want) {
			t.Errorf("%v: %v %s, want %q", c.args, err, stderr, c.want)
		}
	}
}

// post posts a JSON body and returns the response body and status.
func post(t *testing.T, url, body string) (string, int) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	return readResponse(t, resp, err)
}

// TestServeRuntimeLoRA loads and unloads adapters over vLLM's runtime
// endpoints: a loaded adapter is listed and served as generate
// --lora-path serves it, a taken name or a bad directory is a 400, an
// unloaded one is a 404 from then on while its running request ends
// normally, and without --allow-runtime-lora-updating the endpoints do
// not exist.
func TestServeRuntimeLoRA(t *testing.T) {
	one := storiesLoRA(t, fixture.LoRA{Rank: 8, Seed: 1})
	two := storiesLoRA(t, fixture.LoRA{Rank: 4, Seed: 2})
	url := startInProcess(t, "--enable-lora", "--allow-runtime-lora-updating", "--lora-modules", "one="+one)
	resp, code := post(t, url+"/v1/load_lora_adapter", `{"lora_name": "two", "lora_path": "`+two+`"}`)
	if code != 200 || resp != "Success: LoRA adapter 'two' added successfully." {
		t.Fatalf("load: %d %s", code, resp)
	}
	models, _ := get(t, url+"/v1/models")
	if !strings.Contains(models, `"id":"two"`) || !strings.Contains(models, `"root":"`+two+`"`) {
		t.Fatalf("/v1/models after the load: %s", models)
	}
	out := complete(t, url, `{"model": "two", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}`)
	var r struct{ Choices []struct{ Text string } }
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Choices) != 1 {
		t.Fatal(out)
	}
	gen, _, err := runCLI(t, "generate", "--device", "cpu", "--prompt", "Once upon a time", "--max-tokens", "16", "--output", "json", "--lora-path", two)
	if err != nil {
		t.Fatal(err)
	}
	var g generateResult
	if err := json.Unmarshal([]byte(gen), &g); err != nil || g.Text != r.Choices[0].Text || g.Text == storiesText {
		t.Fatalf("served %q, generate --lora-path %q (%v)", r.Choices[0].Text, g.Text, err)
	}
	for body, want := range map[string]string{
		`{"lora_name": "two", "lora_path": "` + two + `"}`:         "has already been loaded",
		`{"lora_name": "stories260K", "lora_path": "` + two + `"}`: "has already been loaded",
		`{"lora_name": "three", "lora_path": "/nonexistent"}`:      "adapter_config.json",
		`{"lora_name": "three"}`:                                   "both lora_name and lora_path",
	} {
		if resp, code := post(t, url+"/v1/load_lora_adapter", body); code != 400 || !strings.Contains(resp, want) {
			t.Errorf("load %s: %d %s, want 400 %q", body, code, resp, want)
		}
	}

	// Unload "one" while a streamed request runs with it: the request
	// ends normally, new ones get a 404.
	stream, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model": "one", "prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": true, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	buf := make([]byte, 1)
	if _, err := stream.Body.Read(buf); err != nil { // the first event: the request runs
		t.Fatal(err)
	}
	if resp, code := post(t, url+"/v1/unload_lora_adapter", `{"lora_name": "one"}`); code != 200 || !strings.Contains(resp, "removed successfully") {
		t.Fatalf("unload: %d %s", code, resp)
	}
	rest, err := io.ReadAll(stream.Body)
	if err != nil || !strings.Contains(string(rest), `"finish_reason":"length"`) || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the running request after the unload: %v %s", err, rest)
	}
	if out := complete(t, url, `{"model": "one", "prompt": "Once", "max_tokens": 2}`); !strings.Contains(out, "model_not_found") {
		t.Fatalf("a request for the unloaded adapter: %s", out)
	}
	if resp, code := post(t, url+"/v1/unload_lora_adapter", `{"lora_name": "one"}`); code != 404 || !strings.Contains(resp, "cannot be found") {
		t.Fatalf("second unload: %d %s", code, resp)
	}
	if models, _ := get(t, url+"/v1/models"); strings.Contains(models, `"id":"one"`) {
		t.Fatalf("/v1/models after the unload: %s", models)
	}

	fixed := startInProcess(t, "--enable-lora", "--lora-modules", "one="+one)
	if _, code := post(t, fixed+"/v1/load_lora_adapter", `{"lora_name": "two", "lora_path": "`+two+`"}`); code != 404 {
		t.Fatalf("load without --allow-runtime-lora-updating: %d", code)
	}
}

// TestServeModelAliases: --served-model-name with several names accepts
// each and lists each, the first first; none may name an adapter.
func TestServeModelAliases(t *testing.T) {
	url := startInProcess(t, "--served-model-name", "alpha beta")
	models, _ := get(t, url+"/v1/models")
	var list struct{ Data []struct{ ID string } }
	if err := json.Unmarshal([]byte(models), &list); err != nil || len(list.Data) != 2 || list.Data[0].ID != "alpha" || list.Data[1].ID != "beta" {
		t.Fatalf("/v1/models: %s", models)
	}
	for _, name := range []string{"alpha", "beta"} {
		if _, code := post(t, url+"/v1/completions", `{"model": "`+name+`", "prompt": "Once", "max_tokens": 2}`); code != 200 {
			t.Errorf("model %s: %d", name, code)
		}
	}
	if _, code := post(t, url+"/v1/completions", `{"model": "stories260K", "prompt": "Once", "max_tokens": 2}`); code != 404 {
		t.Errorf("the directory's name beside --served-model-name: %d", code)
	}
	one := storiesLoRA(t, fixture.LoRA{Seed: 1})
	_, stderr, err := runCLI(t, "serve", "--device", "cpu", "--port", "0", "--served-model-name", "alpha beta", "--enable-lora", "--lora-modules", "beta="+one)
	if err == nil || !strings.Contains(err.Error()+stderr, `the name "beta" is taken`) {
		t.Errorf("an adapter named as an alias: %v %s", err, stderr)
	}
}
