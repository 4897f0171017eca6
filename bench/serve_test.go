package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/model/builtin"
)

func TestServeMooncake(t *testing.T) {
	srv := newFakeServer(t, 0, nil)
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	os.WriteFile(trace, []byte(`{"timestamp": 0, "input_length": 700, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 20, "input_length": 600, "output_length": 2, "hash_ids": [1, 3]}
{"timestamp": 40, "input_length": 100, "output_length": 4, "hash_ids": [4]}
`), 0o644)
	result := filepath.Join(dir, "out.json")
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	rep, err := Serve(context.Background(), ServeConfig{
		Options: Options{
			BaseURL: srv.URL, Replay: true, TimeScale: 10, MaxConcurrency: 2,
			Report:   ReportOptions{SLO: SLO{TTFT: time.Second}},
			Progress: &stderr, ProgressInterval: time.Hour,
		},
		Dataset: "mooncake:" + trace, MaxRequests: 2, ResultJSON: result, SaveResult: true,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	// The model name came from /v1/models, the tokenizer is the built-in one.
	if rep.ModelID != "stories260K" || rep.TokenizerID != "builtin:stories260K" || rep.Completed != 2 || rep.TotalInputTokens != 1302 {
		t.Fatalf("report %+v", rep.RunInfo)
	}
	if !strings.Contains(stdout.String(), "Successful requests:                     2") ||
		!strings.Contains(stdout.String(), "Trace replay speed-up:                   10.00") {
		t.Fatalf("stdout:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "bench: 2/2 requests done, 0 failed") {
		t.Fatalf("stderr:\n%s", stderr.String())
	}
	b, err := os.ReadFile(result)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["completed"] != 2.0 || m["dataset"] != "mooncake:"+trace || m["replay_timestamps"] != true || m["request_goodput"] == nil {
		t.Fatalf("result JSON %s", b)
	}
	saved, _ := filepath.Glob(filepath.Join(dir, "openai-replay10.0x-concurrency2-stories260K-*.json"))
	if len(saved) != 1 {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("--save-result file not found among %v", entries)
	}
	// The two prompts share hash id 1: the same first 512 words.
	bodies, _ := srv.requests()
	p0 := strings.Fields(bodies[0]["prompt"].(string))
	p1 := strings.Fields(bodies[1]["prompt"].(string))
	if strings.Join(p0[:512], " ") != strings.Join(p1[:512], " ") || p0[512] == p1[512] && p0[513] == p1[513] && p0[514] == p1[514] {
		t.Fatal("prompts do not share exactly their first block")
	}
}

func TestServeSyntheticCount(t *testing.T) {
	srv := newFakeServer(t, 0, nil)
	var out bytes.Buffer
	rep, err := Serve(context.Background(), ServeConfig{
		Options: Options{BaseURL: srv.URL, Model: "stories260K"}, Dataset: "synthetic:in=16-32,out=2", MaxRequests: 7,
	}, &out, &out)
	if err != nil || rep.Completed != 7 || rep.NumPrompts != 7 {
		t.Fatalf("%v: %+v\n%s", err, rep, out.String())
	}
	for _, r := range rep.Requests {
		if r.RequestedInputTokens < 16 || r.RequestedInputTokens > 32 || r.InputTokens != r.RequestedInputTokens+1 {
			t.Fatalf("request %+v", r)
		}
	}
}

func TestServeRejects(t *testing.T) {
	srv := newFakeServer(t, 0, nil)
	var out bytes.Buffer
	for _, tc := range []struct {
		name string
		cfg  ServeConfig
		want string
	}{
		{"rate and replay", ServeConfig{Options: Options{BaseURL: srv.URL, Replay: true, RequestRate: 3}, Dataset: "synthetic"}, "not both"},
		{"replay synthetic", ServeConfig{Options: Options{BaseURL: srv.URL, Replay: true}, Dataset: "synthetic"}, "no timestamps"},
		{"unknown model", ServeConfig{Options: Options{BaseURL: srv.URL, Model: "llama-70b"}, Dataset: "synthetic:n=1"}, "--tokenizer"},
		{"bad dataset", ServeConfig{Options: Options{BaseURL: srv.URL}, Dataset: "sharegpt"}, "dataset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Serve(context.Background(), tc.cfg, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestResolveTokenizer(t *testing.T) {
	// A model directory as vLLM reports it in /v1/models "root".
	dir := t.TempDir()
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := fs.ReadFile(builtin.FS(), name)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	srv := newFakeServer(t, 0, nil)
	srv.root = dir
	models, err := ListModels(context.Background(), http.DefaultClient, srv.URL, "")
	if err != nil || len(models) != 1 || models[0].Root != dir {
		t.Fatalf("models %v, %v", models, err)
	}
	tok, id, err := ResolveTokenizer("", "stories260K", models)
	if err != nil || id != dir || tok.VocabSize() != 512 {
		t.Fatalf("from root: %v %q", err, id)
	}
	if _, id, err = ResolveTokenizer(dir, "anything", nil); err != nil || id != dir {
		t.Fatalf("from --tokenizer: %v %q", err, id)
	}
	if _, id, err = ResolveTokenizer("", "stories260K", []ServerModel{{ID: "stories260K", Root: "/nonexistent"}}); err != nil || id != "builtin:stories260K" {
		t.Fatalf("built-in: %v %q", err, id)
	}
	if _, _, err = ResolveTokenizer("", "Qwen/Qwen3-8B", []ServerModel{{ID: "Qwen/Qwen3-8B", Root: "Qwen/Qwen3-8B"}}); err == nil || !strings.Contains(err.Error(), "--tokenizer") {
		t.Fatalf("unknown model: %v", err)
	}
}

func TestDefaultResultName(t *testing.T) {
	for _, tc := range []struct {
		info RunInfo
		want string
	}{
		{RunInfo{Backend: "openai", RequestRate: math.Inf(1), ModelID: "meta-llama/Llama-3.1-8B", Date: "20250101-120000"}, "openai-infqps-Llama-3.1-8B-20250101-120000.json"},
		{RunInfo{Backend: "openai-chat", Label: "exp", RequestRate: 10, MaxConcurrency: 16, ModelID: "m", Date: "d"}, "exp-10.0qps-concurrency16-m-d.json"},
		{RunInfo{Backend: "openai", RequestRate: 2.5, ModelID: "m", Date: "d"}, "openai-2.5qps-m-d.json"},
	} {
		if got := DefaultResultName(&tc.info); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
