package model

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/gearboxlm/gearbox/model/safetensors"
	"github.com/gearboxlm/gearbox/tensor"
)

// Layer holds one decoder layer's weights. Matrices are tensor.Weights in
// the PyTorch nn.Linear layout [out, in], stored in the format Options
// chose (float32, bfloat16, binary16 or Q8_0); vectors (norms, biases)
// are float32. Optional tensors are nil when the architecture does not
// have them.
type Layer struct {
	AttnNorm []float32       // [hidden]
	WQ       *tensor.Weights // [heads·head_dim, hidden]
	WK       *tensor.Weights // [kv_heads·head_dim, hidden]
	WV       *tensor.Weights // [kv_heads·head_dim, hidden]
	BQ       []float32       // [heads·head_dim]     attention_bias / qwen2
	BK       []float32       // [kv_heads·head_dim]
	BV       []float32       // [kv_heads·head_dim]
	QNorm    []float32       // [head_dim]           qwen3
	KNorm    []float32       // [head_dim]           qwen3
	WO       *tensor.Weights // [hidden, heads·head_dim]
	BO       []float32       // [hidden]             llama attention_bias
	MLPNorm  []float32       // [hidden]
	WGate    *tensor.Weights // [intermediate, hidden]
	WUp      *tensor.Weights // [intermediate, hidden]
	WDown    *tensor.Weights // [hidden, intermediate]
	BGate    []float32       // [intermediate]       llama mlp_bias
	BUp      []float32       // [intermediate]
	BDown    []float32       // [hidden]
}

// Weights holds a whole model's weights. Matrices may be views of the
// checkpoint's memory-mapped files (see LoadWeights); such weights are
// valid until Close.
type Weights struct {
	Embed  *tensor.Weights // [vocab, hidden]
	Layers []Layer
	Norm   []float32       // [hidden]
	LMHead *tensor.Weights // [vocab, hidden]; the same *tensor.Weights as Embed when tied

	release func() error // closes the files the matrices view; nil when none
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
// how tensor parallelism splits it. Exactly one of Dst (a vector, shape
// [n]) and Mat (a matrix, shape [n, k]) is set.
type Binding struct {
	Name  string
	Shape []int
	Split Split
	Dst   *[]float32
	Mat   **tensor.Weights
}

// SetFloat32 stores data, the tensor's values row-major, in the binding's
// field: as is for a vector, wrapped without a copy as a float32
// tensor.Weights for a matrix.
func (b Binding) SetFloat32(data []float32) {
	if b.Mat != nil {
		*b.Mat = tensor.NewWeightsF32(data, b.Shape[0], b.Shape[1])
		return
	}
	*b.Dst = data
}

// Bindings returns the table of every tensor the config's architecture
// needs, bound to the fields of w (which it sizes). It is the single place
// that names Hugging Face tensors.
func Bindings(c *Config, w *Weights) []Binding {
	h, q, kv, inter := c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	w.Layers = make([]Layer, c.Layers)
	b := []Binding{{Name: "model.embed_tokens.weight", Shape: []int{c.Vocab, h}, Split: SplitVocab, Mat: &w.Embed}}
	for i := range w.Layers {
		l := &w.Layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, shape []int, split Split, dst *[]float32) {
			b = append(b, Binding{Name: p + name, Shape: shape, Split: split, Dst: dst})
		}
		mat := func(name string, shape []int, split Split, dst **tensor.Weights) {
			b = append(b, Binding{Name: p + name, Shape: shape, Split: split, Mat: dst})
		}
		add("input_layernorm.weight", []int{h}, Replicated, &l.AttnNorm)
		mat("self_attn.q_proj.weight", []int{q, h}, SplitRows, &l.WQ)
		mat("self_attn.k_proj.weight", []int{kv, h}, SplitRows, &l.WK)
		mat("self_attn.v_proj.weight", []int{kv, h}, SplitRows, &l.WV)
		if c.AttentionBias {
			add("self_attn.q_proj.bias", []int{q}, SplitRows, &l.BQ)
			add("self_attn.k_proj.bias", []int{kv}, SplitRows, &l.BK)
			add("self_attn.v_proj.bias", []int{kv}, SplitRows, &l.BV)
		}
		if c.QKNorm {
			add("self_attn.q_norm.weight", []int{c.HeadDim}, Replicated, &l.QNorm)
			add("self_attn.k_norm.weight", []int{c.HeadDim}, Replicated, &l.KNorm)
		}
		mat("self_attn.o_proj.weight", []int{h, q}, SplitCols, &l.WO)
		if c.OutputBias {
			add("self_attn.o_proj.bias", []int{h}, Replicated, &l.BO)
		}
		add("post_attention_layernorm.weight", []int{h}, Replicated, &l.MLPNorm)
		mat("mlp.gate_proj.weight", []int{inter, h}, SplitRows, &l.WGate)
		mat("mlp.up_proj.weight", []int{inter, h}, SplitRows, &l.WUp)
		mat("mlp.down_proj.weight", []int{h, inter}, SplitCols, &l.WDown)
		if c.MLPBias {
			add("mlp.gate_proj.bias", []int{inter}, SplitRows, &l.BGate)
			add("mlp.up_proj.bias", []int{inter}, SplitRows, &l.BUp)
			add("mlp.down_proj.bias", []int{h}, Replicated, &l.BDown)
		}
	}
	b = append(b, Binding{Name: "model.norm.weight", Shape: []int{h}, Split: Replicated, Dst: &w.Norm})
	if !c.TieWordEmbeddings {
		b = append(b, Binding{Name: "lm_head.weight", Shape: []int{c.Vocab, h}, Split: SplitVocab, Mat: &w.LMHead})
	}
	return b
}

// ErrWeights marks a checkpoint whose tensors do not match the config.
var ErrWeights = errors.New("invalid model weights")

// LoadWeights reads every tensor of the binding table from set. Vectors
// (norms, biases) are converted to float32. Matrices are held as
// opts.Storage says: in the checkpoint's dtype by default (DTypeAuto), as
// views of set's memory where the machine is little-endian and the data
// aligned (the memory-mapped file itself, no copy), else copied; or
// converted to the dtype opts names, or quantized. A missing, misshaped or
// unused tensor is an error naming it. When some matrix views set, the
// returned Weights own set and Close closes it; otherwise the caller keeps
// ownership (and may close set as soon as LoadWeights returns).
// opts.Progress, if not nil, is called after each tensor with the bytes
// done and the total.
func LoadWeights(c *Config, set *safetensors.Set, opts Options) (*Weights, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
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
	views := false
	for i, b := range bindings {
		t := tensors[i]
		if b.Mat != nil {
			m, view, err := loadMatrix(t, b.Shape[0], b.Shape[1], opts)
			if err != nil {
				return nil, fmt.Errorf("%w: tensor %s: %w", ErrWeights, b.Name, err)
			}
			*b.Mat, views = m, views || view
		} else {
			data, err := t.Float32()
			if err != nil {
				return nil, fmt.Errorf("%w: tensor %s: %w", ErrWeights, b.Name, err)
			}
			*b.Dst = data
		}
		done += int64(len(t.Bytes()))
		if opts.Progress != nil {
			opts.Progress(done, total)
		}
	}
	if c.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	if views {
		w.release = set.Close
	}
	return w, nil
}

// loadMatrix reads an n×k matrix held as opts.Storage says, reporting
// whether the result views t's file.
func loadMatrix(t *safetensors.Tensor, n, k int, opts Options) (*tensor.Weights, bool, error) {
	var (
		src  *tensor.Weights
		view bool
	)
	switch t.DType {
	case safetensors.F32:
		v, ok := t.Float32View()
		if !ok {
			var err error
			if v, err = t.Float32(); err != nil {
				return nil, false, err
			}
		}
		src, view = tensor.NewWeightsF32(v, n, k), ok
	default: // F16, BF16
		v, ok := t.Uint16View()
		if !ok {
			v = make([]uint16, n*k)
			if err := t.ReadUint16(v); err != nil {
				return nil, false, err
			}
		}
		view = ok
		if t.DType == safetensors.BF16 {
			src = tensor.NewWeightsBF16(v, n, k)
		} else {
			src = tensor.NewWeightsF16(v, n, k)
		}
	}
	dst := opts.Storage(src.DType())
	if dst == src.DType() {
		return src, view, nil
	}
	out := tensor.Convert(opts.Pool, src, dst)
	t.Evict() // converted: the file's pages need not stay resident beside the copy
	return out, false, nil
}

// Close releases the checkpoint files the matrices view (see
// LoadWeights); the weights must not be used after it. It is a no-op for
// weights that view nothing.
func (w *Weights) Close() error {
	if w.release == nil {
		return nil
	}
	err := w.release()
	w.release = nil
	return err
}

// Views reports whether some matrices are the checkpoint's bytes in
// place: views of its memory-mapped files for a directory (which Close
// releases), of the bytes read into memory for LoadFSOptions.
func (w *Weights) Views() bool { return w.release != nil }

// Matrices lists every weight matrix once (a tied LM head is listed only
// as the embedding).
func (w *Weights) Matrices() []*tensor.Weights {
	out := []*tensor.Weights{w.Embed}
	if w.LMHead != nil && w.LMHead != w.Embed {
		out = append(out, w.LMHead)
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		out = append(out, l.WQ, l.WK, l.WV, l.WO, l.WGate, l.WUp, l.WDown)
	}
	return out
}

// Vectors lists every float32 vector (norms, biases), nil optional ones
// left out.
func (w *Weights) Vectors() [][]float32 {
	out := [][]float32{w.Norm}
	for i := range w.Layers {
		l := &w.Layers[i]
		for _, t := range [][]float32{l.AttnNorm, l.BQ, l.BK, l.BV, l.QNorm, l.KNorm, l.BO, l.MLPNorm, l.BGate, l.BUp, l.BDown} {
			if t != nil {
				out = append(out, t)
			}
		}
	}
	return out
}

// Bytes is the memory the weights take as stored: every matrix in its
// format (a tied LM head once) and the float32 vectors. Matrices that
// view a memory-mapped file count although they are the file's pages.
func (w *Weights) Bytes() int64 {
	var n int64
	for _, m := range w.Matrices() {
		n += int64(m.Bytes())
	}
	for _, v := range w.Vectors() {
		n += 4 * int64(len(v))
	}
	return n
}

// MatrixDType is the format of the weights' matrices, and false when they
// do not all share one.
func (w *Weights) MatrixDType() (tensor.DType, bool) {
	ms := w.Matrices()
	d := ms[0].DType()
	for _, m := range ms[1:] {
		if m.DType() != d {
			return d, false
		}
	}
	return d, true
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
