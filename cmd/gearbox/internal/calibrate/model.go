package calibrate

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/tensor"
)

// Shape is the shape of a random-weight Llama model (config.json's
// sizes), for the measurements and validations that run whole engine
// steps.
type Shape struct {
	Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim, Vocab, MaxPositions int
}

// Config returns the shape as a validated Llama config: untied
// embeddings, no biases, RoPE θ = 10000.
func (s Shape) Config() (*model.Config, error) {
	data, err := json.Marshal(map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"hidden_size": s.Hidden, "intermediate_size": s.Intermediate, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim,
		"vocab_size": s.Vocab, "max_position_embeddings": s.MaxPositions, "rms_norm_eps": 1e-5,
		"rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": false,
		"bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
	})
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	cfg, err := model.ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("calibrate: model %+v: %w", s, err)
	}
	return cfg, nil
}

// String names the shape by its sizes.
func (s Shape) String() string {
	return fmt.Sprintf("hidden %d, intermediate %d, %d layers, %d/%d heads of %d, vocabulary %d",
		s.Hidden, s.Intermediate, s.Layers, s.Heads, s.KVHeads, s.HeadDim, s.Vocab)
}

// ModelShape is the config of a real model's shape by name, as
// ModelShapes lists them ("llama-3.2-1b", "llama-3.1-8b"): its sizes,
// tied embeddings and RoPE scaling, for random weights of the real
// model's bytes and FLOPs.
func ModelShape(name string) (*model.Config, error) {
	spec, ok := fixture.Shapes[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return nil, fmt.Errorf("calibrate: unknown model shape %q (known: %s)", name, strings.Join(ModelShapes(), ", "))
	}
	data, err := json.Marshal(spec.Config())
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	cfg, err := model.ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("calibrate: model shape %s: %w", name, err)
	}
	return cfg, nil
}

// ModelShapes lists the names ModelShape knows, sorted.
func ModelShapes() []string {
	return slices.Sorted(maps.Keys(fixture.Shapes))
}

// shapeOf is cfg's sizes as a Shape.
func shapeOf(cfg *model.Config) Shape {
	return Shape{
		Hidden: cfg.Hidden, Intermediate: cfg.Intermediate, Layers: cfg.Layers, Heads: cfg.Heads, KVHeads: cfg.KVHeads,
		HeadDim: cfg.HeadDim, Vocab: cfg.Vocab, MaxPositions: cfg.MaxPositions,
	}
}

// randomWeights fills every tensor of cfg with small pseudo-random values
// (the same for the same config), in parallel on pool, and holds the
// matrices in format (tensor.F32, BF16 or F16), as the CPU engine holds a
// checkpoint's. Timing does not depend on the values; keeping them small
// keeps the activations finite.
func randomWeights(cfg *model.Config, pool *tensor.Pool, format tensor.DType) *model.Weights {
	w := &model.Weights{}
	for i, b := range model.Bindings(cfg, w) {
		n := 1
		for _, d := range b.Shape {
			n *= d
		}
		data := make([]float32, n)
		fillRandom(pool, data, uint32(i))
		b.SetFloat32(data)
		if b.Mat != nil {
			*b.Mat = tensor.Convert(pool, *b.Mat, format)
		}
	}
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	return w
}

// fillRandom fills data with values in [−0.025, 0.025) from a xorshift
// stream per chunk, seeded by seed and the chunk's offset.
func fillRandom(pool *tensor.Pool, data []float32, seed uint32) {
	pool.Run(len(data), func(lo, hi int) {
		x := uint32(lo)*2654435761 + seed*40503 + 1
		for i := lo; i < hi; i++ {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			data[i] = (float32(x>>8)/(1<<24) - 0.5) * 0.05
		}
	})
}
