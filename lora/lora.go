// Package lora reads LoRA adapters in the format of Hugging Face's PEFT
// (adapter_config.json beside adapter_model.safetensors) for a decoder
// model. An adapter changes some of each layer's projections W (out × in)
// by a low-rank update s·B·A (A is r × in, B is out × r, s is
// lora_alpha / r, or lora_alpha / √r with use_rslora). The executor applies
// it to activations, y += s·(x·Aᵀ)·Bᵀ, and never to the weights, so the
// base model stays shared and requests of different adapters (and of none)
// run in one batch, as vLLM's multi-LoRA serving does.
//
// What is read: LoRA on the attention projections (q_proj, k_proj,
// v_proj, o_proj) and the MLP's (gate_proj, up_proj, down_proj) of any
// layers, with per-module ranks (PEFT's rank_pattern: each module's rank is
// its tensors'). What is refused, with an error naming it: other
// adapter types, DoRA, biases, modules_to_save, embedding and LM-head
// adapters, alpha_pattern, fan_in_fan_out, ranks above the server's
// maximum, and pickled adapter_model.bin files.
package lora

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/safetensors"
	"github.com/gearboxlm/gearbox/tensor"
)

// Module is one of a decoder layer's adaptable projections.
type Module int

// The projections, in a layer's order.
const (
	Q Module = iota
	K
	V
	O
	Gate
	Up
	Down
	NumModules
)

var moduleNames = [NumModules]string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

func (m Module) String() string { return moduleNames[m] }

// Shape is the module's weight shape in a model of config cfg: out × in.
func (m Module) Shape(cfg *model.Config) (out, in int) {
	q, kv := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	switch m {
	case Q:
		return q, cfg.Hidden
	case K, V:
		return kv, cfg.Hidden
	case O:
		return cfg.Hidden, q
	case Gate, Up:
		return cfg.Intermediate, cfg.Hidden
	}
	return cfg.Hidden, cfg.Intermediate
}

// Update is one module's low-rank update, in float32.
type Update struct {
	Rank    int
	In, Out int
	Scale   float32   // s
	A       []float32 // [Rank, In], row-major
	BT      []float32 // Bᵀ: [Rank, Out], so each row of ΔW's product is Rank contiguous axpys
}

// Adapter is a loaded LoRA adapter.
type Adapter struct {
	Name string // what requests call it (their "model")
	Path string // its directory
	// Base is the adapter config's base_model_name_or_path, informational.
	Base string
	// Rank is the largest of its modules' ranks.
	Rank int
	// Layers[l][m] is the update of module m of layer l; nil where the
	// adapter leaves the module alone.
	Layers [][NumModules]*Update
}

// Bytes is the memory the adapter's float32 matrices take.
func (a *Adapter) Bytes() int64 {
	var n int64
	for _, l := range a.Layers {
		for _, u := range l {
			if u != nil {
				n += 4 * int64(len(u.A)+len(u.BT))
			}
		}
	}
	return n
}

// ConfigName and WeightsName are the files of a PEFT adapter directory.
const (
	ConfigName  = "adapter_config.json"
	WeightsName = "adapter_model.safetensors"
)

// config is the part of adapter_config.json that matters.
type config struct {
	PEFTType     string          `json:"peft_type"`
	R            int             `json:"r"`
	Alpha        float64         `json:"lora_alpha"`
	Bias         string          `json:"bias"`
	RSLoRA       bool            `json:"use_rslora"`
	DoRA         bool            `json:"use_dora"`
	FanInFanOut  bool            `json:"fan_in_fan_out"`
	ModulesSave  []string        `json:"modules_to_save"`
	AlphaPattern map[string]any  `json:"alpha_pattern"`
	Base         string          `json:"base_model_name_or_path"`
	Targets      json.RawMessage `json:"target_modules"` // informational: the tensors say what is adapted
}

// Load reads the adapter in dir for a model of config cfg, refusing ranks
// above maxRank (0: no limit). Errors name the file and what is wrong.
func Load(name, dir string, cfg *model.Config, maxRank int) (*Adapter, error) {
	c, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, WeightsName)
	if _, err := os.Stat(path); err != nil {
		if _, binErr := os.Stat(filepath.Join(dir, "adapter_model.bin")); binErr == nil {
			return nil, fmt.Errorf("lora: %s holds adapter_model.bin, a pickled PyTorch file, which is not read: save the adapter with safetensors (PEFT's default)", dir)
		}
		return nil, fmt.Errorf("lora: %w", err)
	}
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	defer f.Close()
	a := &Adapter{Name: name, Path: dir, Base: c.Base, Layers: make([][NumModules]*Update, cfg.Layers)}
	type half struct{ a, b *safetensors.Tensor }
	found := map[[2]int]*half{}
	for _, t := range f.Tensors() {
		layer, m, isA, err := parseName(t.Name, cfg.Layers)
		if err != nil {
			return nil, fmt.Errorf("lora: %s: %w", path, err)
		}
		key := [2]int{layer, int(m)}
		h := found[key]
		if h == nil {
			h = &half{}
			found[key] = h
		}
		if isA {
			h.a = t
		} else {
			h.b = t
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("lora: %s holds no lora_A/lora_B tensors", path)
	}
	for key, h := range found {
		layer, m := key[0], Module(key[1])
		where := fmt.Sprintf("layer %d %s", layer, m)
		if h.a == nil || h.b == nil {
			return nil, fmt.Errorf("lora: %s: %s has only one of lora_A and lora_B", path, where)
		}
		u, err := newUpdate(h.a, h.b, m, cfg, c)
		if err != nil {
			return nil, fmt.Errorf("lora: %s: %s: %w", path, where, err)
		}
		if maxRank > 0 && u.Rank > maxRank {
			return nil, fmt.Errorf("lora: %s: %s has rank %d, above --max-lora-rank %d", path, where, u.Rank, maxRank)
		}
		a.Rank = max(a.Rank, u.Rank)
		a.Layers[layer][m] = u
	}
	return a, nil
}

// readConfig reads and checks adapter_config.json.
func readConfig(dir string) (config, error) {
	var c config
	data, err := os.ReadFile(filepath.Join(dir, ConfigName))
	if err != nil {
		return c, fmt.Errorf("lora: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("lora: %s: %w", filepath.Join(dir, ConfigName), err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("lora: %s: "+format, append([]any{filepath.Join(dir, ConfigName)}, args...)...)
	}
	switch {
	case !strings.EqualFold(c.PEFTType, "LORA"):
		return c, bad("peft_type %q: only LORA adapters are read", c.PEFTType)
	case c.R < 1:
		return c, bad("r %d: want at least 1", c.R)
	case !(c.Alpha > 0) || math.IsInf(c.Alpha, 0):
		return c, bad("lora_alpha %v: want a positive number", c.Alpha)
	case c.Bias != "" && c.Bias != "none":
		return c, bad("bias %q: adapters with biases are not supported", c.Bias)
	case c.DoRA:
		return c, bad("use_dora: DoRA adapters are not supported")
	case c.FanInFanOut:
		return c, bad("fan_in_fan_out: transposed (Conv1D) weights are not supported")
	case len(c.ModulesSave) > 0:
		return c, bad("modules_to_save %v: adapters that replace whole modules are not supported", c.ModulesSave)
	case len(c.AlphaPattern) > 0:
		return c, bad("alpha_pattern: per-module alphas are not supported")
	}
	return c, nil
}

// parseName reads "base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight"
// (and PEFT's spellings with an adapter name before "weight").
func parseName(name string, layers int) (layer int, m Module, isA bool, err error) {
	rest, ok := strings.CutPrefix(name, "base_model.model.")
	if !ok {
		return 0, 0, false, fmt.Errorf("tensor %q: not a PEFT LoRA tensor (no base_model.model. prefix)", name)
	}
	parts := strings.Split(rest, ".")
	// model layers L (self_attn|mlp) X lora_(A|B) [adapter] weight
	if len(parts) < 7 || parts[0] != "model" || parts[1] != "layers" || parts[len(parts)-1] != "weight" || len(parts) > 8 {
		return 0, 0, false, fmt.Errorf("tensor %q: only LoRA on the decoder layers' attention and MLP projections is supported", name)
	}
	layer, err = strconv.Atoi(parts[2])
	if err != nil || layer < 0 || layer >= layers {
		return 0, 0, false, fmt.Errorf("tensor %q: layer %q outside the model's %d", name, parts[2], layers)
	}
	m = -1
	for i, n := range moduleNames {
		if n == parts[4] {
			m = Module(i)
		}
	}
	block := "self_attn"
	if m >= Gate {
		block = "mlp"
	}
	if m < 0 || parts[3] != block {
		return 0, 0, false, fmt.Errorf("tensor %q: %s.%s is not an adaptable projection (q/k/v/o_proj under self_attn, gate/up/down_proj under mlp)", name, parts[3], parts[4])
	}
	switch parts[5] {
	case "lora_A":
		isA = true
	case "lora_B":
	default:
		return 0, 0, false, fmt.Errorf("tensor %q: %s is not lora_A or lora_B", name, parts[5])
	}
	return layer, m, isA, nil
}

// newUpdate checks A and B against the module's shape and converts them.
func newUpdate(ta, tb *safetensors.Tensor, m Module, cfg *model.Config, c config) (*Update, error) {
	out, in := m.Shape(cfg)
	if len(ta.Shape) != 2 || len(tb.Shape) != 2 {
		return nil, fmt.Errorf("lora_A %v and lora_B %v must be matrices", ta.Shape, tb.Shape)
	}
	r := ta.Shape[0]
	if r < 1 || ta.Shape[1] != in || tb.Shape[0] != out || tb.Shape[1] != r {
		return nil, fmt.Errorf("lora_A %v and lora_B %v do not fit a %d×%d projection (want [r %d] and [%d r])", ta.Shape, tb.Shape, out, in, in, out)
	}
	a, err := ta.Float32()
	if err != nil {
		return nil, fmt.Errorf("lora_A: %w", err)
	}
	b, err := tb.Float32()
	if err != nil {
		return nil, fmt.Errorf("lora_B: %w", err)
	}
	for _, v := range [][]float32{a, b} {
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, errors.New("a weight is not finite")
			}
		}
	}
	bt := make([]float32, r*out)
	for o := range out {
		for j := range r {
			bt[j*out+o] = b[o*r+j]
		}
	}
	scale := c.Alpha / float64(r)
	if c.RSLoRA {
		scale = c.Alpha / math.Sqrt(float64(r))
	}
	return &Update{Rank: r, In: in, Out: out, Scale: float32(scale), A: a, BT: bt}, nil
}

// Apply adds the update of one row to y: s·(x·Aᵀ)·Bᵀ over the input
// columns [inLo, inLo+len(x)) and the output rows [outLo, outLo+len(y))
// of the module, the part of it one rank of a tensor-parallel group
// holds (a column-parallel projection's rank has all of x and some of y;
// a row-parallel one's some of x, whose partial sums the group's
// all-reduce adds). t is scratch of at least Rank values.
func (u *Update) Apply(y, x []float32, inLo, outLo int, t []float32) {
	t = t[:u.Rank]
	for j := range t {
		a := u.A[j*u.In+inLo:]
		t[j] = u.Scale * tensor.Dot(x, a[:len(x)])
	}
	for j, c := range t {
		b := u.BT[j*u.Out+outLo:]
		tensor.Axpy(c, b[:len(y)], y)
	}
}
