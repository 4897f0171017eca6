package model_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/safetensors"
)

func writeDir(t *testing.T, spec fixture.Spec) string {
	t.Helper()
	dir, err := fixture.Dir(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	data, _ = json.Marshal(c)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func rewriteTensors(t *testing.T, dir string, spec fixture.Spec, edit func([]safetensors.WriteTensor) []safetensors.WriteTensor) {
	t.Helper()
	ts := edit(spec.Tensors())
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
}

func TestLoadMatchesConfig(t *testing.T) {
	spec := fixture.Spec{Heads: 8, KVHeads: 2, Seed: 1}
	m, err := model.Load(writeDir(t, spec), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if c.Hidden != 64 || c.Heads != 8 || c.KVHeads != 2 || c.HeadDim != 8 || c.Layers != 2 || c.Vocab != 320 {
		t.Fatalf("config = %+v", c)
	}
	if n, k := m.Weights.Layers[1].WK.Shape(); n*k != 2*8*64 {
		t.Fatalf("k_proj is %d×%d, want %d values", n, k, 2*8*64)
	}
	if m.EOS()[0] != 2 || c.BOS != 1 {
		t.Fatalf("special tokens: bos %d eos %v", c.BOS, m.EOS())
	}
}

func TestMalformedModelDirs(t *testing.T) {
	spec := fixture.Spec{Heads: 4, KVHeads: 2, Seed: 3}
	cases := []struct {
		name    string
		corrupt func(t *testing.T, dir string)
		want    string
	}{
		{"truncated safetensors", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()-100); err != nil {
				t.Fatal(err)
			}
		}, "model.safetensors"},
		{"header larger than file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			data, _ := os.ReadFile(p)
			binary.LittleEndian.PutUint64(data, uint64(len(data))*4)
			os.WriteFile(p, data, 0o644)
		}, "header"},
		{"file shorter than the length prefix", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte{1, 2, 3}, 0o644)
		}, "model.safetensors"},
		{"header is not JSON", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			data, _ := os.ReadFile(p)
			data[8] = '#'
			os.WriteFile(p, data, 0o644)
		}, "model.safetensors"},
		{"wrong dtype", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			data, _ := os.ReadFile(p)
			n := binary.LittleEndian.Uint64(data)
			hdr := strings.Replace(string(data[8:8+n]), `"model.norm.weight":{"dtype":"F32"`, `"model.norm.weight":{"dtype":"I32"`, 1)
			if hdr == string(data[8:8+n]) {
				t.Fatal("could not find model.norm.weight in the header")
			}
			copy(data[8:], hdr)
			os.WriteFile(p, data, 0o644)
		}, "model.norm.weight"},
		{"shape mismatch", func(t *testing.T, dir string) {
			rewriteTensors(t, dir, spec, func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
				for i := range ts {
					if ts[i].Name == "model.layers.1.mlp.up_proj.weight" {
						ts[i].Shape = []int{64, 128}
					}
				}
				return ts
			})
		}, "model.layers.1.mlp.up_proj.weight has shape [64 128]"},
		{"missing tensor", func(t *testing.T, dir string) {
			rewriteTensors(t, dir, spec, func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
				for i := range ts {
					if ts[i].Name == "model.layers.0.self_attn.v_proj.weight" {
						return append(ts[:i], ts[i+1:]...)
					}
				}
				return ts
			})
		}, "missing tensor model.layers.0.self_attn.v_proj.weight"},
		{"unused tensor", func(t *testing.T, dir string) {
			rewriteTensors(t, dir, spec, func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
				return append(ts, safetensors.WriteTensor{Name: "model.layers.0.extra.weight", DType: "F32", Shape: []int{2}, Data: []float32{1, 2}})
			})
		}, "unused tensors for llama: model.layers.0.extra.weight"},
		{"missing lm_head when untied", func(t *testing.T, dir string) {
			rewriteTensors(t, dir, spec, func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
				return ts[:len(ts)-1]
			})
		}, "lm_head.weight"},
		{"bad JSON config", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "llama",`), 0o644)
		}, "bad JSON"},
		{"unknown model_type", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["model_type"] = "gpt_neox" })
		}, `unsupported model_type "gpt_neox"`},
		{"missing model_type", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { delete(c, "model_type") })
		}, "missing field model_type"},
		{"missing vocab_size", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { delete(c, "vocab_size") })
		}, "missing field vocab_size"},
		{"heads not dividing hidden", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["num_attention_heads"] = 6; c["num_key_value_heads"] = 3 })
		}, "num_attention_heads 6 does not divide hidden_size 64"},
		{"kv heads not dividing heads", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["num_key_value_heads"] = 3 })
		}, "num_key_value_heads 3 must be positive and divide num_attention_heads 4"},
		{"negative hidden size", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["hidden_size"] = -64 })
		}, "hidden_size must be positive"},
		{"unsupported rope scaling", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 4.0} })
		}, `unsupported rope_scaling type "yarn"`},
		{"missing config", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "config.json"))
		}, "config.json"},
		{"missing tokenizer", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "tokenizer.json"))
		}, "missing tokenizer"},
		{"bad tokenizer JSON", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": [`), 0o644)
		}, "tokenizer"},
		{"no weights", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model.safetensors"))
		}, "safetensors"},
		{"index names a missing shard", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model.safetensors"))
			idx := `{"metadata": {}, "weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}`
			os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(idx), 0o644)
		}, "model-00001-of-00002.safetensors"},
		{"special token outside vocab", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["eos_token_id"] = []int{2, 5000} })
		}, "special token id 5000 is outside vocab_size 320"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeDir(t, spec)
			tc.corrupt(t, dir)
			_, err := model.Load(dir, model.Options{})
			if err == nil {
				t.Fatalf("Load succeeded, want an error mentioning %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	if _, err := model.Load(filepath.Join(t.TempDir(), "nope"), model.Options{}); err == nil {
		t.Fatal("Load of a missing directory succeeded")
	}
}

func TestInvFreqLlama3(t *testing.T) {
	// Llama 3.1 8B's rope_scaling: the highest-frequency pairs are unchanged
	// and the lowest are divided by the factor.
	cfg, err := model.ParseConfig([]byte(`{"model_type":"llama","hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,
		"num_attention_heads":32,"num_key_value_heads":8,"vocab_size":128256,"rope_theta":500000.0,
		"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},
		"bos_token_id":128000,"eos_token_id":[128001,128008,128009]}`))
	if err != nil {
		t.Fatal(err)
	}
	inv := cfg.InvFreq()
	if inv[0] != 1 {
		t.Fatalf("inv_freq[0] = %v, want 1", inv[0])
	}
	base := 1 / math.Pow(500000, 126.0/128)
	if got := inv[63]; math.Abs(got-base/8) > 1e-15 {
		t.Fatalf("inv_freq[63] = %v, want %v", got, base/8)
	}
	if len(cfg.EOS) != 3 || cfg.KVDim() != 1024 {
		t.Fatalf("eos %v kv dim %d", cfg.EOS, cfg.KVDim())
	}
	if got := cfg.NumParams(); got != 8030261248 {
		t.Fatalf("Llama-3.1-8B parameters = %d, want 8030261248", got)
	}
}
