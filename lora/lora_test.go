package lora

import (
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

var spec = fixture.Spec{Hidden: 32, Heads: 4, KVHeads: 2, Layers: 2, Intermediate: 48}

func modelConfig(t *testing.T) *model.Config {
	t.Helper()
	dir, err := fixture.Dir(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func writeAdapter(t *testing.T, l fixture.LoRA) string {
	t.Helper()
	dir := t.TempDir()
	if err := fixture.WriteLoRA(dir, spec, l); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLoad reads adapters of every module, of some, with rsLoRA and in
// BF16, and checks shapes, ranks, scales and that BT is B transposed.
func TestLoad(t *testing.T) {
	cfg := modelConfig(t)
	dir := writeAdapter(t, fixture.LoRA{Rank: 4, Alpha: 8, Seed: 1})
	a, err := Load("sql", dir, cfg, 16)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "sql" || a.Rank != 4 || a.Base != "fixture" || len(a.Layers) != 2 {
		t.Fatalf("adapter %+v", a)
	}
	f, err := safetensors.Open(filepath.Join(dir, WeightsName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for l := range a.Layers {
		for m, u := range a.Layers[l] {
			out, in := Module(m).Shape(cfg)
			if u == nil || u.Rank != 4 || u.In != in || u.Out != out || u.Scale != 2 || len(u.A) != 4*in || len(u.BT) != 4*out {
				t.Fatalf("layer %d %s: %+v", l, Module(m), u)
			}
			block := "self_attn"
			if Module(m) >= Gate {
				block = "mlp"
			}
			tb, _ := f.Tensor("base_model.model.model.layers." + string(rune('0'+l)) + "." + block + "." + Module(m).String() + ".lora_B.weight")
			b, _ := tb.Float32()
			for o := range out {
				for j := range 4 {
					if u.BT[j*out+o] != b[o*4+j] {
						t.Fatalf("layer %d %s: BT[%d][%d] %v, B[%d][%d] %v", l, Module(m), j, o, u.BT[j*out+o], o, j, b[o*4+j])
					}
				}
			}
		}
	}
	if a.Bytes() != 4*2*4*(64+48+48+64+80+80+80) { // bytes · layers · rank · (in+out) of q, k, v, o, gate, up, down
		t.Errorf("Bytes() = %d", a.Bytes())
	}
	// Some modules of one layer, rsLoRA, BF16.
	dir = writeAdapter(t, fixture.LoRA{Rank: 9, Alpha: 6, RSLoRA: true, Modules: []string{"self_attn.v_proj", "mlp.down_proj"}, Layers: []int{1}, DType: "BF16"})
	a, err = Load("x", dir, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	for l := range a.Layers {
		for m, u := range a.Layers[l] {
			want := l == 1 && (Module(m) == V || Module(m) == Down)
			if (u != nil) != want || want && math.Abs(float64(u.Scale)-2) > 1e-6 {
				t.Fatalf("layer %d %s: %+v", l, Module(m), u)
			}
		}
	}
}

// TestApply checks one row's update against s·(x·Aᵀ)·Bᵀ in float64, whole
// and as two ranks of a row-parallel split would add it.
func TestApply(t *testing.T) {
	cfg := modelConfig(t)
	a, err := Load("a", writeAdapter(t, fixture.LoRA{Rank: 3, Seed: 5}), cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	u := a.Layers[0][Down] // 32 × 48
	x := make([]float32, u.In)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	want := make([]float64, u.Out)
	for o := range want {
		for j := range u.Rank {
			t := 0.0
			for i, v := range x {
				t += float64(v) * float64(u.A[j*u.In+i])
			}
			want[o] += float64(u.Scale) * t * float64(u.BT[j*u.Out+o])
		}
	}
	scratch := make([]float32, u.Rank)
	whole := make([]float32, u.Out)
	u.Apply(whole, x, 0, 0, scratch)
	split := make([]float32, u.Out)
	u.Apply(split, x[:20], 0, 0, scratch)
	u.Apply(split, x[20:], 20, 0, scratch)
	part := make([]float32, 10) // output rows [5, 15) only
	u.Apply(part, x, 0, 5, scratch)
	for o, w := range want {
		if math.Abs(float64(whole[o])-w) > 1e-4 || math.Abs(float64(split[o])-w) > 1e-4 || o >= 5 && o < 15 && math.Abs(float64(part[o-5])-w) > 1e-4 {
			t.Fatalf("row %d: whole %v, split %v, want %v", o, whole[o], split[o], w)
		}
	}
}

// TestLoadErrors: every refused adapter gets an error naming the problem.
func TestLoadErrors(t *testing.T) {
	cfg := modelConfig(t)
	edit := func(t *testing.T, key string, value any) string {
		dir := writeAdapter(t, fixture.LoRA{})
		path := filepath.Join(dir, ConfigName)
		var c map[string]any
		data, _ := os.ReadFile(path)
		_ = json.Unmarshal(data, &c)
		c[key] = value
		data, _ = json.Marshal(c)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	tensors := func(t *testing.T, ts ...safetensors.WriteTensor) string {
		dir := writeAdapter(t, fixture.LoRA{})
		if err := safetensors.WriteFile(filepath.Join(dir, WeightsName), ts, nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	ten := func(name string, shape ...int) safetensors.WriteTensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		return safetensors.WriteTensor{Name: name, DType: safetensors.F32, Shape: shape, Data: make([]float32, n)}
	}
	const q = "base_model.model.model.layers.0.self_attn.q_proj."
	nan := ten(q+"lora_A.weight", 2, 32)
	nan.Data[3] = float32(math.NaN())
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) string
		want string
	}{
		{"no config", func(t *testing.T) string { return t.TempDir() }, "adapter_config.json"},
		{"prefix tuning", func(t *testing.T) string { return edit(t, "peft_type", "PREFIX_TUNING") }, `peft_type "PREFIX_TUNING"`},
		{"bias", func(t *testing.T) string { return edit(t, "bias", "all") }, `bias "all"`},
		{"dora", func(t *testing.T) string { return edit(t, "use_dora", true) }, "DoRA"},
		{"modules_to_save", func(t *testing.T) string { return edit(t, "modules_to_save", []string{"lm_head"}) }, "modules_to_save [lm_head]"},
		{"alpha_pattern", func(t *testing.T) string { return edit(t, "alpha_pattern", map[string]int{"q_proj": 3}) }, "alpha_pattern"},
		{"zero alpha", func(t *testing.T) string { return edit(t, "lora_alpha", 0) }, "lora_alpha 0"},
		{"rank too large", func(t *testing.T) string { return writeAdapter(t, fixture.LoRA{Rank: 32}) }, "rank 32, above --max-lora-rank 16"},
		{"pickle", func(t *testing.T) string {
			dir := writeAdapter(t, fixture.LoRA{})
			_ = os.Rename(filepath.Join(dir, WeightsName), filepath.Join(dir, "adapter_model.bin"))
			return dir
		}, "pickled"},
		{"embedding", func(t *testing.T) string {
			return tensors(t, ten("base_model.model.model.embed_tokens.lora_embedding_A", 4, 320))
		}, "only LoRA on the decoder layers"},
		{"lm_head", func(t *testing.T) string { return tensors(t, ten("base_model.model.lm_head.lora_A.weight", 4, 32)) }, "only LoRA on the decoder layers"},
		{"layer", func(t *testing.T) string {
			return tensors(t, ten("base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight", 4, 32))
		}, `layer "2" outside the model's 2`},
		{"module", func(t *testing.T) string {
			return tensors(t, ten("base_model.model.model.layers.0.mlp.q_proj.lora_A.weight", 4, 32))
		}, "mlp.q_proj is not an adaptable projection"},
		{"A alone", func(t *testing.T) string { return tensors(t, ten(q+"lora_A.weight", 2, 32)) }, "only one of lora_A and lora_B"},
		{"shape", func(t *testing.T) string {
			return tensors(t, ten(q+"lora_A.weight", 2, 32), ten(q+"lora_B.weight", 16, 2))
		}, "do not fit a 32×32 projection"},
		{"ranks", func(t *testing.T) string {
			return tensors(t, ten(q+"lora_A.weight", 2, 32), ten(q+"lora_B.weight", 32, 3))
		}, "do not fit"},
		{"nan", func(t *testing.T) string { return tensors(t, nan, ten(q+"lora_B.weight", 32, 2)) }, "not finite"},
		{"empty", func(t *testing.T) string { return tensors(t) }, "no lora_A/lora_B tensors"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load("x", c.dir(t), cfg, 16)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, c.want)
			}
		})
	}
}
