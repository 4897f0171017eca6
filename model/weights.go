package model

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/gearboxlm/gearbox/model/safetensors"
)

// Layer holds one decoder layer's weights, float32, row-major in the
// PyTorch nn.Linear layout [out, in]. Optional tensors are nil when the
// architecture does not have them.
type Layer struct {
	AttnNorm []float32 // [hidden]
	WQ       []float32 // [heads·head_dim, hidden]
	WK       []float32 // [kv_heads·head_dim, hidden]
	WV       []float32 // [kv_heads·head_dim, hidden]
	BQ       []float32 // [heads·head_dim]     attention_bias / qwen2
	BK       []float32 // [kv_heads·head_dim]
	BV       []float32 // [kv_heads·head_dim]
	QNorm    []float32 // [head_dim]           qwen3
	KNorm    []float32 // [head_dim]           qwen3
	WO       []float32 // [hidden, heads·head_dim]
	BO       []float32 // [hidden]             llama attention_bias
	MLPNorm  []float32 // [hidden]
	WGate    []float32 // [intermediate, hidden]
	WUp      []float32 // [intermediate, hidden]
	WDown    []float32 // [hidden, intermediate]
	BGate    []float32 // [intermediate]       llama mlp_bias
	BUp      []float32 // [intermediate]
	BDown    []float32 // [hidden]
}

// Weights holds a whole model's weights in float32.
type Weights struct {
	Embed  []float32 // [vocab, hidden]
	Layers []Layer
	Norm   []float32 // [hidden]
	LMHead []float32 // [vocab, hidden]; aliases Embed when tied
}

// Split says how a tensor is divided among tensor-parallel ranks.
type Split int

const (
	Replicated Split = iota // every rank holds all of it (norms, o/down biases)
	SplitRows               // output features (rows) split: q/k/v, gate/up and their biases
	SplitCols               // input features (columns) split: o_proj, down_proj
	SplitVocab              // vocabulary rows split: embedding, LM head
)

// Binding ties one Hugging Face tensor name to a weight field, its shape and
// how tensor parallelism splits it.
type Binding struct {
	Name  string
	Shape []int
	Split Split
	Dst   *[]float32
}

// Bindings returns the table of every tensor the config's architecture
// needs, bound to the fields of w (which it sizes). It is the single place
// that names Hugging Face tensors.
func Bindings(c *Config, w *Weights) []Binding {
	h, q, kv, inter := c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	w.Layers = make([]Layer, c.Layers)
	b := []Binding{{"model.embed_tokens.weight", []int{c.Vocab, h}, SplitVocab, &w.Embed}}
	for i := range w.Layers {
		l := &w.Layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, shape []int, split Split, dst *[]float32) {
			b = append(b, Binding{p + name, shape, split, dst})
		}
		add("input_layernorm.weight", []int{h}, Replicated, &l.AttnNorm)
		add("self_attn.q_proj.weight", []int{q, h}, SplitRows, &l.WQ)
		add("self_attn.k_proj.weight", []int{kv, h}, SplitRows, &l.WK)
		add("self_attn.v_proj.weight", []int{kv, h}, SplitRows, &l.WV)
		if c.AttentionBias {
			add("self_attn.q_proj.bias", []int{q}, SplitRows, &l.BQ)
			add("self_attn.k_proj.bias", []int{kv}, SplitRows, &l.BK)
			add("self_attn.v_proj.bias", []int{kv}, SplitRows, &l.BV)
		}
		if c.QKNorm {
			add("self_attn.q_norm.weight", []int{c.HeadDim}, Replicated, &l.QNorm)
			add("self_attn.k_norm.weight", []int{c.HeadDim}, Replicated, &l.KNorm)
		}
		add("self_attn.o_proj.weight", []int{h, q}, SplitCols, &l.WO)
		if c.OutputBias {
			add("self_attn.o_proj.bias", []int{h}, Replicated, &l.BO)
		}
		add("post_attention_layernorm.weight", []int{h}, Replicated, &l.MLPNorm)
		add("mlp.gate_proj.weight", []int{inter, h}, SplitRows, &l.WGate)
		add("mlp.up_proj.weight", []int{inter, h}, SplitRows, &l.WUp)
		add("mlp.down_proj.weight", []int{h, inter}, SplitCols, &l.WDown)
		if c.MLPBias {
			add("mlp.gate_proj.bias", []int{inter}, SplitRows, &l.BGate)
			add("mlp.up_proj.bias", []int{inter}, SplitRows, &l.BUp)
			add("mlp.down_proj.bias", []int{h}, Replicated, &l.BDown)
		}
	}
	b = append(b, Binding{"model.norm.weight", []int{h}, Replicated, &w.Norm})
	if !c.TieWordEmbeddings {
		b = append(b, Binding{"lm_head.weight", []int{c.Vocab, h}, SplitVocab, &w.LMHead})
	}
	return b
}

// ErrWeights marks a checkpoint whose tensors do not match the config.
var ErrWeights = errors.New("invalid model weights")

// LoadWeights reads every tensor of the binding table from set, converting
// to float32. A missing, misshaped or unused tensor is an error naming it.
// progress, if not nil, is called after each tensor with the bytes done and
// the total.
func LoadWeights(c *Config, set *safetensors.Set, progress func(done, total int64)) (*Weights, error) {
	w := &Weights{}
	bindings := Bindings(c, w)
	used := make(map[string]bool, len(bindings))
	var total, done int64
	tensors := make([]*safetensors.Tensor, len(bindings))
	for i, b := range bindings {
		t, ok := set.Tensor(b.Name)
		if !ok {
			if b.Name == "lm_head.weight" {
				return nil, fmt.Errorf("%w: missing tensor lm_head.weight (tie_word_embeddings is false)", ErrWeights)
			}
			return nil, fmt.Errorf("%w: missing tensor %s", ErrWeights, b.Name)
		}
		if !equalShape(t.Shape, b.Shape) {
			return nil, fmt.Errorf("%w: tensor %s has shape %v, config implies %v", ErrWeights, b.Name, t.Shape, b.Shape)
		}
		switch t.DType {
		case "F32", "F16", "BF16":
		default:
			return nil, fmt.Errorf("%w: tensor %s has dtype %s; supported: F32, F16, BF16", ErrWeights, b.Name, t.DType)
		}
		used[b.Name] = true
		tensors[i] = t
		total += int64(len(t.Bytes()))
	}
	var unused []string
	for _, name := range set.Names() {
		if !used[name] && !ignorable(name) {
			unused = append(unused, name)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		if len(unused) > 5 {
			unused = append(unused[:5], fmt.Sprintf("and %d more", len(unused)-5))
		}
		return nil, fmt.Errorf("%w: unused tensors for %s: %s", ErrWeights, c.ModelType, strings.Join(unused, ", "))
	}
	for i, b := range bindings {
		data, err := tensors[i].Float32()
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %s: %w", ErrWeights, b.Name, err)
		}
		*b.Dst = data
		done += int64(len(tensors[i].Bytes()))
		if progress != nil {
			progress(done, total)
		}
	}
	if c.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	return w, nil
}

// ignorable reports tensors some checkpoints carry that hold no weights.
func ignorable(name string) bool {
	return strings.HasSuffix(name, ".rotary_emb.inv_freq")
}

func equalShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// NumParams counts the parameters the config implies (the LM head once when
// tied).
func (c *Config) NumParams() int64 {
	var n int64
	for _, b := range Bindings(c, &Weights{}) {
		p := int64(1)
		for _, d := range b.Shape {
			p *= int64(d)
		}
		n += p
	}
	return n
}
