// Package oracle is the reference for correctness tests: a deliberately
// naive float64 forward pass of a Llama-family model, read straight from a
// Hugging Face directory. It shares no kernels and no config parsing with
// the engine (only the safetensors reader), follows transformers' modeling
// code line by line, and is slow on purpose. Only tests import it.
package oracle

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gearboxlm/gearbox/model/safetensors"
)

// Model is a model held in float64.
type Model struct {
	cfg     map[string]any
	t       map[string][]float64
	hidden  int
	inter   int
	layers  int
	heads   int
	kvHeads int
	headDim int
	vocab   int
	eps     float64
	window  int
	invFreq []float64
	tied    bool

	// BF16Inputs rounds the input of every product with a BF16 weight to
	// bfloat16 first (ties to even), as the engine's CPU kernels do
	// (tensor.MatMulW).
	BF16Inputs bool
	bf16       map[string]bool // tensors stored as BF16
}

// Load reads dir's config.json and safetensors into float64.
func Load(dir string) (*Model, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	m := &Model{t: map[string][]float64{}, bf16: map[string]bool{}}
	if err := json.Unmarshal(data, &m.cfg); err != nil {
		return nil, err
	}
	num := func(k string, def float64) float64 {
		if v, ok := m.cfg[k].(float64); ok {
			return v
		}
		return def
	}
	m.hidden = int(num("hidden_size", 0))
	m.inter = int(num("intermediate_size", 0))
	m.layers = int(num("num_hidden_layers", 0))
	m.heads = int(num("num_attention_heads", 0))
	m.kvHeads = int(num("num_key_value_heads", float64(m.heads)))
	m.headDim = int(num("head_dim", float64(m.hidden/m.heads)))
	m.vocab = int(num("vocab_size", 0))
	m.eps = num("rms_norm_eps", 1e-6)
	m.tied, _ = m.cfg["tie_word_embeddings"].(bool)
	if m.cfg["model_type"] == "mistral" {
		m.window = int(num("sliding_window", 0))
	}
	m.invFreq = invFreq(m.cfg, m.headDim, num("rope_theta", 10000))

	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer set.Close()
	for _, name := range set.Names() {
		t, _ := set.Tensor(name)
		f, err := t.Float32()
		if err != nil {
			return nil, err
		}
		v := make([]float64, len(f))
		for i, x := range f {
			v[i] = float64(x)
		}
		m.t[name] = v
		m.bf16[name] = t.DType == safetensors.BF16
	}
	return m, nil
}

// invFreq follows transformers' _compute_default_rope_parameters,
// _compute_linear_scaling_rope_parameters and _compute_llama3_parameters.
func invFreq(cfg map[string]any, dim int, theta float64) []float64 {
	inv := make([]float64, dim/2)
	for i := range inv {
		inv[i] = 1.0 / math.Pow(theta, float64(2*i)/float64(dim))
	}
	rs, _ := cfg["rope_scaling"].(map[string]any)
	if rs == nil {
		return inv
	}
	typ, _ := rs["rope_type"].(string)
	if typ == "" {
		typ, _ = rs["type"].(string)
	}
	factor, _ := rs["factor"].(float64)
	switch typ {
	case "linear":
		for i := range inv {
			inv[i] /= factor
		}
	case "llama3":
		low, _ := rs["low_freq_factor"].(float64)
		high, _ := rs["high_freq_factor"].(float64)
		old, _ := rs["original_max_position_embeddings"].(float64)
		lowWl, highWl := old/low, old/high
		for i, f := range inv {
			wl := 2 * math.Pi / f
			llama := f
			if wl > lowWl {
				llama = f / factor
			}
			smooth := (old/wl - low) / (high - low)
			smoothed := (1-smooth)*llama/factor + smooth*llama
			medium := !(wl < highWl) && !(wl > lowWl)
			if medium {
				inv[i] = smoothed
			} else {
				inv[i] = llama
			}
		}
	}
	return inv
}

func (m *Model) w(name string) []float64 {
	v, ok := m.t[name]
	if !ok {
		panic(fmt.Sprintf("oracle: missing tensor %s", name))
	}
	return v
}

// proj returns x·Wᵀ (+ W's bias) for the weight named p+name+".weight"
// [out, in], rounding x first under BF16Inputs when W is BF16.
func (m *Model) proj(x []float64, p, name string, out int) []float64 {
	w := p + name + ".weight"
	return m.linear(x, m.w(w), m.opt(p+name+".bias"), out, m.bf16[w])
}

// linear returns x·Wᵀ (+ b) for W [out, in]; bf16 says W is stored as
// BF16.
func (m *Model) linear(x, w, b []float64, out int, bf16 bool) []float64 {
	if bf16 && m.BF16Inputs {
		r := make([]float64, len(x))
		for i, v := range x {
			r[i] = roundBF16(v)
		}
		x = r
	}
	in := len(x)
	y := make([]float64, out)
	for o := 0; o < out; o++ {
		s := 0.0
		for i := 0; i < in; i++ {
			s += x[i] * w[o*in+i]
		}
		if b != nil {
			s += b[o]
		}
		y[o] = s
	}
	return y
}

// roundBF16 rounds v to float32, then to bfloat16 (ties to even).
func roundBF16(v float64) float64 {
	b := math.Float32bits(float32(v))
	if b&0x7fffffff > 0x7f800000 {
		return v
	}
	b += 0x7fff + (b>>16)&1
	return float64(math.Float32frombits(b &^ 0xffff))
}

func rmsNorm(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * r * w[i]
	}
	return y
}

// rope applies rotate_half RoPE to one head in place.
func rope(x []float64, pos int, inv []float64) {
	half := len(x) / 2
	for i := 0; i < half; i++ {
		c, s := math.Cos(float64(pos)*inv[i]), math.Sin(float64(pos)*inv[i])
		a, b := x[i], x[i+half]
		x[i] = a*c - b*s
		x[i+half] = b*c + a*s
	}
}

func (m *Model) opt(name string) []float64 { return m.t[name] }

// Logits runs the whole sequence from scratch and returns the logits of
// every position, [len(tokens)][vocab].
func (m *Model) Logits(tokens []int) [][]float64 {
	head, headName := m.t["lm_head.weight"], "lm_head.weight"
	if m.tied || head == nil {
		head, headName = m.w("model.embed_tokens.weight"), "model.embed_tokens.weight"
	}
	out := m.Hidden(tokens)
	for t, hn := range out {
		out[t] = m.linear(hn, head, nil, m.vocab, m.bf16[headName])
	}
	return out
}

// Hidden runs the whole sequence from scratch and returns the final-norm
// hidden state of every position (the LM head's input), [len(tokens)][hidden].
func (m *Model) Hidden(tokens []int) [][]float64 {
	T, h, d := len(tokens), m.hidden, m.headDim
	x := make([][]float64, T)
	emb := m.w("model.embed_tokens.weight")
	for t, id := range tokens {
		x[t] = append([]float64(nil), emb[id*h:(id+1)*h]...)
	}
	for l := 0; l < m.layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		q := make([][]float64, T)
		k := make([][]float64, T)
		v := make([][]float64, T)
		for t := 0; t < T; t++ {
			xn := rmsNorm(x[t], m.w(p+"input_layernorm.weight"), m.eps)
			q[t] = m.proj(xn, p, "self_attn.q_proj", m.heads*d)
			k[t] = m.proj(xn, p, "self_attn.k_proj", m.kvHeads*d)
			v[t] = m.proj(xn, p, "self_attn.v_proj", m.kvHeads*d)
			for hh := 0; hh < m.heads; hh++ {
				head := q[t][hh*d : (hh+1)*d]
				if qn := m.opt(p + "self_attn.q_norm.weight"); qn != nil {
					copy(head, rmsNorm(head, qn, m.eps))
				}
				rope(head, t, m.invFreq)
			}
			for hh := 0; hh < m.kvHeads; hh++ {
				head := k[t][hh*d : (hh+1)*d]
				if kn := m.opt(p + "self_attn.k_norm.weight"); kn != nil {
					copy(head, rmsNorm(head, kn, m.eps))
				}
				rope(head, t, m.invFreq)
			}
		}
		group := m.heads / m.kvHeads
		for t := 0; t < T; t++ {
			attn := make([]float64, m.heads*d)
			for hh := 0; hh < m.heads; hh++ {
				g := hh / group
				lo := 0
				if m.window > 0 && t-m.window+1 > 0 {
					lo = t - m.window + 1
				}
				scores := make([]float64, t+1)
				mx := math.Inf(-1)
				for j := lo; j <= t; j++ {
					s := 0.0
					for i := 0; i < d; i++ {
						s += q[t][hh*d+i] * k[j][g*d+i]
					}
					scores[j] = s / math.Sqrt(float64(d))
					mx = math.Max(mx, scores[j])
				}
				sum := 0.0
				for j := lo; j <= t; j++ {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
				for j := lo; j <= t; j++ {
					for i := 0; i < d; i++ {
						attn[hh*d+i] += scores[j] / sum * v[j][g*d+i]
					}
				}
			}
			o := m.proj(attn, p, "self_attn.o_proj", h)
			for i := range o {
				x[t][i] += o[i]
			}
			xn := rmsNorm(x[t], m.w(p+"post_attention_layernorm.weight"), m.eps)
			gate := m.proj(xn, p, "mlp.gate_proj", m.inter)
			up := m.proj(xn, p, "mlp.up_proj", m.inter)
			for i := range gate {
				gate[i] = gate[i] / (1 + math.Exp(-gate[i])) * up[i]
			}
			down := m.proj(gate, p, "mlp.down_proj", h)
			for i := range down {
				x[t][i] += down[i]
			}
		}
	}
	out := make([][]float64, T)
	for t := range x {
		out[t] = rmsNorm(x[t], m.w("model.norm.weight"), m.eps)
	}
	return out
}

// Greedy extends prompt by n greedy tokens (argmax, lowest id on ties),
// recomputing the whole sequence each step.
func (m *Model) Greedy(prompt []int, n int) []int {
	seq := append([]int(nil), prompt...)
	var out []int
	for i := 0; i < n; i++ {
		logits := m.Logits(seq)
		last := logits[len(logits)-1]
		best := 0
		for j, v := range last {
			if v > last[best] {
				best = j
			}
		}
		out = append(out, best)
		seq = append(seq, best)
	}
	return out
}

// MergeLoRA adds the update of the PEFT LoRA adapter in dir to the weights
// it names, as PEFT's merge_and_unload does: W += s·B·A with s =
// lora_alpha / r (lora_alpha / √r with use_rslora), r each module's rank.
func (m *Model) MergeLoRA(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
	if err != nil {
		return err
	}
	var c struct {
		Alpha  float64 `json:"lora_alpha"`
		RSLoRA bool    `json:"use_rslora"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return err
	}
	f, err := safetensors.Open(filepath.Join(dir, "adapter_model.safetensors"))
	if err != nil {
		return err
	}
	defer f.Close()
	for _, ta := range f.Tensors() {
		base, ok := strings.CutSuffix(ta.Name, ".lora_A.weight")
		if !ok {
			continue
		}
		tb, ok := f.Tensor(base + ".lora_B.weight")
		if !ok {
			return fmt.Errorf("oracle: %s has no lora_B", base)
		}
		a, err := ta.Float32()
		if err != nil {
			return err
		}
		b, err := tb.Float32()
		if err != nil {
			return err
		}
		r, in, out := ta.Shape[0], ta.Shape[1], tb.Shape[0]
		s := c.Alpha / float64(r)
		if c.RSLoRA {
			s = c.Alpha / math.Sqrt(float64(r))
		}
		w := m.w(strings.TrimPrefix(base, "base_model.model.") + ".weight")
		for o := range out {
			for i := range in {
				sum := 0.0
				for j := range r {
					sum += float64(b[o*r+j]) * float64(a[j*in+i])
				}
				w[o*in+i] += s * sum
			}
		}
	}
	return nil
}
