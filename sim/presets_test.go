package sim

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
)

// TestPresets parses every preset through model.ParseConfig and checks
// its shape and parameter count: exactly (the count its config implies,
// as a regression) and against the size its model card publishes.
func TestPresets(t *testing.T) {
	cases := []struct {
		id                                    string
		params                                int64
		published                             float64 // billions, from the model card
		hidden, inter, layers, heads, kvHeads int
		vocab                                 int
	}{
		{"meta-llama/Llama-3.1-8B-Instruct", 8030261248, 8.03, 4096, 14336, 32, 32, 8, 128256},
		{"meta-llama/Llama-3.1-8B", 8030261248, 8.03, 4096, 14336, 32, 32, 8, 128256},
		{"meta-llama/Llama-3.2-1B-Instruct", 1235814400, 1.24, 2048, 8192, 16, 32, 8, 128256},
		{"meta-llama/Llama-2-7b-hf", 6738415616, 6.74, 4096, 11008, 32, 32, 32, 32000},
		{"meta-llama/Llama-2-13b-hf", 13015864320, 13.0, 5120, 13824, 40, 40, 40, 32000},
		{"codellama/CodeLlama-34b-hf", 33743970304, 33.7, 8192, 22016, 48, 64, 8, 32000},
		// The card calls it 70B; the Hub's safetensors metadata gives 69B.
		{"meta-llama/Llama-2-70b-hf", 68976648192, 69.0, 8192, 28672, 80, 64, 8, 32000},
		// 64 layers of Llama-3-8B's shape: the name's 15B.
		{"elinas/Llama-3-15B-Instruct-zeroed", 15009845248, 15.0, 4096, 14336, 64, 32, 8, 128256},
		{"meta-llama/Llama-3.3-70B-Instruct", 70553706496, 70.6, 8192, 28672, 80, 64, 8, 128256},
		{"Qwen/Qwen3-32B", 32762123264, 32.8, 5120, 25600, 64, 64, 8, 151936},
		{"Qwen/Qwen2.5-14B-Instruct", 14770033664, 14.7, 5120, 13824, 48, 40, 8, 152064},
		{"Qwen/Qwen2.5-32B-Instruct", 32763876352, 32.5, 5120, 27648, 64, 40, 8, 152064},
		// CSPS's models (papers/002 §5.2), in Llama form (see presets.go).
		{"THUDM/glm-4-9b-chat-1m", 9484021760, 9.48, 4096, 13696, 40, 32, 4, 151552},
		{"internlm/internlm2_5-7b-chat-1m", 7737708544, 7.74, 4096, 14336, 32, 32, 8, 92544},
		{"Qwen/Qwen2.5-72B-Instruct", 72706203648, 72.7, 8192, 29568, 80, 64, 8, 152064},
		{"meta-llama/Llama-3.1-70B-Instruct", 70553706496, 70.6, 8192, 28672, 80, 64, 8, 128256},
		{"meta-llama/Llama-3.1-405B", 405853388800, 406, 16384, 53248, 126, 128, 8, 128256},
	}
	var ids []string
	for _, c := range cases {
		ids = append(ids, c.id)
		cfg, err := LookupModel(c.id)
		if err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		headDim, tied := 128, false
		if c.id == "meta-llama/Llama-3.2-1B-Instruct" { // Llama 3.2's small models
			headDim, tied = 64, true
		}
		if cfg.Hidden != c.hidden || cfg.Intermediate != c.inter || cfg.Layers != c.layers || cfg.Heads != c.heads ||
			cfg.KVHeads != c.kvHeads || cfg.Vocab != c.vocab || cfg.HeadDim != headDim || cfg.TieWordEmbeddings != tied {
			t.Errorf("%s: shape %+v", c.id, cfg)
		}
		if got := cfg.NumParams(); got != c.params {
			t.Errorf("%s: %d parameters, want %d", c.id, got, c.params)
		}
		// Qwen2.5's cards round their totals down by up to 0.8%.
		if got := float64(cfg.NumParams()) / 1e9; math.Abs(got/c.published-1) > 0.01 {
			t.Errorf("%s: %.2f B parameters, the model card says %.2f B", c.id, got, c.published)
		}
	}
	slices.Sort(ids)
	if got := Models(); !slices.Equal(got, ids) {
		t.Errorf("Models() = %v, want %v", got, ids)
	}
	qwen3, _ := LookupModel("Qwen/Qwen3-32B")
	llama, _ := LookupModel("meta-llama/Llama-3.3-70B-Instruct")
	if !qwen3.QKNorm || qwen3.AttentionBias || qwen3.MaxPositions != 40960 || qwen3.RopeTheta != 1e6 {
		t.Errorf("Qwen3-32B: %+v", qwen3)
	}
	if llama.RopeScaling.Type != "llama3" || llama.RopeScaling.Factor != 8 || llama.MaxPositions != 131072 || len(llama.EOS) != 3 {
		t.Errorf("Llama-3.3-70B: %+v", llama)
	}
	// The Seesaw paper's models: contexts, RoPE and the KV bytes per
	// token in fp16 (2 · layers · KV heads · 128 · 2 bytes: 320 KiB for
	// the 70B, 256 KiB for the 15B).
	l2, _ := LookupModel("meta-llama/Llama-2-70b-hf")
	l3, _ := LookupModel("elinas/Llama-3-15B-Instruct-zeroed")
	if l2.MaxPositions != 4096 || l2.RopeTheta != 10000 || l3.MaxPositions != 8192 || l3.RopeTheta != 500000 || l3.RopeScaling.Type != "" {
		t.Errorf("Llama-2-70B %+v, Llama-3-15B %+v", l2, l3)
	}
	for cfg, kib := range map[*model.Config]int{l2: 320, l3: 256} {
		if got := 2 * cfg.Layers * cfg.KVHeads * cfg.HeadDim * 2; got != kib<<10 {
			t.Errorf("%d layers: %d KV bytes per token, want %d KiB", cfg.Layers, got, kib)
		}
	}
	if q, _ := LookupModel("Qwen/Qwen2.5-14B-Instruct"); !q.AttentionBias || q.SlidingWindow != 0 {
		t.Errorf("Qwen2.5-14B: bias %v, sliding window %d", q.AttentionBias, q.SlidingWindow)
	}
}

func TestLookupModel(t *testing.T) {
	if cfg, err := LookupModel("qwen/qwen3-32b"); err != nil || cfg.ModelType != "qwen3" {
		t.Errorf("case-insensitive id: %v", err)
	}
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Hidden: 32, Heads: 4, KVHeads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := LookupModel(dir); err != nil || cfg.Hidden != 32 || cfg.KVHeads != 2 {
		t.Errorf("directory: %+v, %v", cfg, err)
	}
	// Only config.json is needed.
	bare := t.TempDir()
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bare, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LookupModel(bare); err != nil {
		t.Errorf("config-only directory: %v", err)
	}
	if _, err := LookupModel(t.TempDir()); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("directory without config.json: %v", err)
	}
	if _, err := LookupModel(filepath.Join(bare, "config.json")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file: %v", err)
	}
	if _, err := LookupModel("meta-llama/Llama-4"); err == nil || !strings.Contains(err.Error(), "Qwen/Qwen3-32B") {
		t.Errorf("unknown id: %v", err)
	}
}
