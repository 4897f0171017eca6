package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Config is a validated Hugging Face config.json of a Llama-family model
// (model_type llama, mistral, qwen2, qwen3). All sizes are element counts.
type Config struct {
	ModelType    string // "llama", "mistral", "qwen2" or "qwen3"
	Architecture string // first entry of "architectures", informational

	Hidden       int // hidden_size
	Intermediate int // intermediate_size (SwiGLU inner width)
	Layers       int // num_hidden_layers
	Heads        int // num_attention_heads
	KVHeads      int // num_key_value_heads (GQA); equals Heads for MHA
	HeadDim      int // head_dim, or Hidden/Heads when absent
	Vocab        int // vocab_size

	RMSNormEps    float64
	RopeTheta     float64
	RopeScaling   RopeScaling
	MaxPositions  int // max_position_embeddings
	SlidingWindow int // 0 when every key is visible

	TieWordEmbeddings bool
	AttentionBias     bool // bias on q, k, v (qwen2 always; llama/qwen3 via attention_bias)
	OutputBias        bool // bias on o_proj (llama attention_bias)
	MLPBias           bool // bias on gate/up/down (llama mlp_bias)
	QKNorm            bool // per-head RMSNorm on q and k before RoPE (qwen3)

	BOS int   // -1 when absent
	EOS []int // may be empty

	TorchDtype string // informational: the checkpoint's declared dtype
}

// RopeScaling is the rope_scaling entry. Type is "" (none), "linear" or "llama3".
type RopeScaling struct {
	Type                          string
	Factor                        float64
	LowFreqFactor                 float64
	HighFreqFactor                float64
	OriginalMaxPositionEmbeddings int
}

// GenerationConfig holds the generation_config.json fields Gearbox uses.
// Zero values mean "not given".
type GenerationConfig struct {
	EOS               []int
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	RepetitionPenalty *float64
}

// ErrConfig marks an invalid or unsupported config.json.
var ErrConfig = errors.New("invalid model config")

// rawConfig mirrors config.json; pointers tell absent from zero.
type rawConfig struct {
	ModelType         string          `json:"model_type"`
	Architectures     []string        `json:"architectures"`
	HiddenSize        *int            `json:"hidden_size"`
	IntermediateSize  *int            `json:"intermediate_size"`
	NumHiddenLayers   *int            `json:"num_hidden_layers"`
	NumAttentionHeads *int            `json:"num_attention_heads"`
	NumKeyValueHeads  *int            `json:"num_key_value_heads"`
	HeadDim           *int            `json:"head_dim"`
	VocabSize         *int            `json:"vocab_size"`
	RMSNormEps        *float64        `json:"rms_norm_eps"`
	RopeTheta         *float64        `json:"rope_theta"`
	RopeScaling       json.RawMessage `json:"rope_scaling"`
	RopeParameters    json.RawMessage `json:"rope_parameters"`
	MaxPositions      *int            `json:"max_position_embeddings"`
	SlidingWindow     *int            `json:"sliding_window"`
	UseSlidingWindow  *bool           `json:"use_sliding_window"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	AttentionBias     *bool           `json:"attention_bias"`
	MLPBias           *bool           `json:"mlp_bias"`
	HiddenAct         string          `json:"hidden_act"`
	BOS               json.RawMessage `json:"bos_token_id"`
	EOS               json.RawMessage `json:"eos_token_id"`
	TorchDtype        string          `json:"torch_dtype"`
	Dtype             string          `json:"dtype"`
}

type rawRope struct {
	Type                          string   `json:"type"`
	RopeType                      string   `json:"rope_type"`
	Factor                        *float64 `json:"factor"`
	LowFreqFactor                 *float64 `json:"low_freq_factor"`
	HighFreqFactor                *float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings *int     `json:"original_max_position_embeddings"`
	RopeTheta                     *float64 `json:"rope_theta"`
}

// LoadConfig reads dir/config.json and, when present, dir/generation_config.json
// (whose eos_token_id, if any, replaces the config's).
func LoadConfig(dir string) (*Config, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	gen, err := LoadGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	if gen != nil && len(gen.EOS) > 0 {
		cfg.EOS = gen.EOS
	}
	return cfg, nil
}

// LoadGenerationConfig reads dir/generation_config.json; it returns nil, nil
// when the file does not exist.
func LoadGenerationConfig(dir string) (*GenerationConfig, error) {
	path := filepath.Join(dir, "generation_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	g, err := ParseGenerationConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

// ParseGenerationConfig parses generation_config.json contents.
func ParseGenerationConfig(data []byte) (*GenerationConfig, error) {
	var raw struct {
		EOS               json.RawMessage `json:"eos_token_id"`
		Temperature       *float64        `json:"temperature"`
		TopP              *float64        `json:"top_p"`
		TopK              *int            `json:"top_k"`
		MinP              *float64        `json:"min_p"`
		RepetitionPenalty *float64        `json:"repetition_penalty"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: bad JSON: %v", ErrConfig, err)
	}
	eos, err := tokenIDs("eos_token_id", raw.EOS)
	if err != nil {
		return nil, err
	}
	return &GenerationConfig{EOS: eos, Temperature: raw.Temperature, TopP: raw.TopP, TopK: raw.TopK, MinP: raw.MinP, RepetitionPenalty: raw.RepetitionPenalty}, nil
}

// ParseConfig parses and validates config.json contents.
func ParseConfig(data []byte) (*Config, error) {
	var raw rawConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: bad JSON: %v", ErrConfig, err)
	}
	c := &Config{ModelType: raw.ModelType, TorchDtype: raw.TorchDtype}
	if c.TorchDtype == "" {
		c.TorchDtype = raw.Dtype
	}
	if len(raw.Architectures) > 0 {
		c.Architecture = raw.Architectures[0]
	}
	switch raw.ModelType {
	case "llama", "mistral", "qwen2", "qwen3":
	case "":
		return nil, fmt.Errorf("%w: missing field model_type", ErrConfig)
	default:
		return nil, fmt.Errorf("%w: unsupported model_type %q (supported: llama, mistral, qwen2, qwen3)", ErrConfig, raw.ModelType)
	}
	if raw.HiddenAct != "" && raw.HiddenAct != "silu" {
		return nil, fmt.Errorf("%w: unsupported hidden_act %q (only silu)", ErrConfig, raw.HiddenAct)
	}
	required := []struct {
		name string
		src  *int
		dst  *int
	}{
		{"hidden_size", raw.HiddenSize, &c.Hidden},
		{"intermediate_size", raw.IntermediateSize, &c.Intermediate},
		{"num_hidden_layers", raw.NumHiddenLayers, &c.Layers},
		{"num_attention_heads", raw.NumAttentionHeads, &c.Heads},
		{"vocab_size", raw.VocabSize, &c.Vocab},
	}
	for _, f := range required {
		if f.src == nil {
			return nil, fmt.Errorf("%w: missing field %s", ErrConfig, f.name)
		}
		if *f.src <= 0 {
			return nil, fmt.Errorf("%w: %s must be positive, got %d", ErrConfig, f.name, *f.src)
		}
		*f.dst = *f.src
	}
	c.KVHeads = c.Heads
	if raw.NumKeyValueHeads != nil {
		c.KVHeads = *raw.NumKeyValueHeads
	}
	if c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("%w: num_key_value_heads %d must be positive and divide num_attention_heads %d", ErrConfig, c.KVHeads, c.Heads)
	}
	if raw.HeadDim != nil {
		c.HeadDim = *raw.HeadDim
	} else {
		if c.Hidden%c.Heads != 0 {
			return nil, fmt.Errorf("%w: num_attention_heads %d does not divide hidden_size %d (and no head_dim is given)", ErrConfig, c.Heads, c.Hidden)
		}
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.HeadDim <= 0 || c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("%w: head_dim must be a positive even number for RoPE, got %d", ErrConfig, c.HeadDim)
	}
	if c.Layers > 1024 || c.Hidden > 1<<17 || c.Intermediate > 1<<19 || c.Vocab > 1<<22 || c.Heads > 1024 || c.HeadDim > 1024 {
		return nil, fmt.Errorf("%w: implausibly large dimensions (hidden %d, intermediate %d, layers %d, heads %d, head_dim %d, vocab %d)",
			ErrConfig, c.Hidden, c.Intermediate, c.Layers, c.Heads, c.HeadDim, c.Vocab)
	}

	c.RMSNormEps = 1e-6
	if raw.RMSNormEps != nil {
		c.RMSNormEps = *raw.RMSNormEps
	}
	if !(c.RMSNormEps > 0) || c.RMSNormEps > 1 {
		return nil, fmt.Errorf("%w: rms_norm_eps must be in (0, 1], got %v", ErrConfig, c.RMSNormEps)
	}
	c.MaxPositions = 2048
	if raw.MaxPositions != nil {
		c.MaxPositions = *raw.MaxPositions
	}
	if c.MaxPositions <= 0 {
		return nil, fmt.Errorf("%w: max_position_embeddings must be positive, got %d", ErrConfig, c.MaxPositions)
	}
	if err := c.parseRope(raw); err != nil {
		return nil, err
	}
	if raw.SlidingWindow != nil && *raw.SlidingWindow > 0 {
		use := raw.ModelType == "mistral"
		if raw.UseSlidingWindow != nil {
			use = *raw.UseSlidingWindow
		}
		if use {
			c.SlidingWindow = *raw.SlidingWindow
		}
	}

	switch raw.ModelType {
	case "qwen2":
		c.AttentionBias = true
	case "qwen3":
		c.QKNorm = true
		c.AttentionBias = raw.AttentionBias != nil && *raw.AttentionBias
		c.OutputBias = c.AttentionBias
	default:
		c.AttentionBias = raw.AttentionBias != nil && *raw.AttentionBias
		c.OutputBias = c.AttentionBias
		c.MLPBias = raw.MLPBias != nil && *raw.MLPBias
	}
	// Transformers' default differs per family: Llama and Mistral untie,
	// Qwen2/Qwen3 configs always state it.
	c.TieWordEmbeddings = raw.TieWordEmbeddings != nil && *raw.TieWordEmbeddings

	var err error
	bos, err := tokenIDs("bos_token_id", raw.BOS)
	if err != nil {
		return nil, err
	}
	c.BOS = -1
	if len(bos) > 0 {
		c.BOS = bos[0]
	}
	if c.EOS, err = tokenIDs("eos_token_id", raw.EOS); err != nil {
		return nil, err
	}
	for _, id := range append(c.EOS, c.BOS) {
		if id >= c.Vocab {
			return nil, fmt.Errorf("%w: special token id %d is outside vocab_size %d", ErrConfig, id, c.Vocab)
		}
	}
	return c, nil
}

func (c *Config) parseRope(raw rawConfig) error {
	c.RopeTheta = 10000
	if raw.RopeTheta != nil {
		c.RopeTheta = *raw.RopeTheta
	}
	scaling := raw.RopeScaling
	if len(raw.RopeParameters) > 0 && string(raw.RopeParameters) != "null" {
		// transformers v5 moves rope_theta and the scaling into rope_parameters.
		scaling = raw.RopeParameters
	}
	if len(scaling) > 0 && string(scaling) != "null" {
		var r rawRope
		if err := json.Unmarshal(scaling, &r); err != nil {
			return fmt.Errorf("%w: rope_scaling: %v", ErrConfig, err)
		}
		if r.RopeTheta != nil {
			c.RopeTheta = *r.RopeTheta
		}
		typ := r.RopeType
		if typ == "" {
			typ = r.Type
		}
		switch typ {
		case "", "default":
		case "linear", "llama3":
			c.RopeScaling.Type = typ
			if r.Factor == nil || *r.Factor <= 0 {
				return fmt.Errorf("%w: rope_scaling type %s needs a positive factor", ErrConfig, typ)
			}
			c.RopeScaling.Factor = *r.Factor
			if typ == "llama3" {
				if r.LowFreqFactor == nil || r.HighFreqFactor == nil || r.OriginalMaxPositionEmbeddings == nil {
					return fmt.Errorf("%w: rope_scaling llama3 needs low_freq_factor, high_freq_factor and original_max_position_embeddings", ErrConfig)
				}
				c.RopeScaling.LowFreqFactor = *r.LowFreqFactor
				c.RopeScaling.HighFreqFactor = *r.HighFreqFactor
				c.RopeScaling.OriginalMaxPositionEmbeddings = *r.OriginalMaxPositionEmbeddings
				if !(c.RopeScaling.HighFreqFactor > c.RopeScaling.LowFreqFactor) || c.RopeScaling.OriginalMaxPositionEmbeddings <= 0 {
					return fmt.Errorf("%w: rope_scaling llama3 needs high_freq_factor > low_freq_factor and a positive original_max_position_embeddings", ErrConfig)
				}
			}
		default:
			return fmt.Errorf("%w: unsupported rope_scaling type %q (supported: linear, llama3)", ErrConfig, typ)
		}
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("%w: rope_theta must be positive, got %v", ErrConfig, c.RopeTheta)
	}
	return nil
}

// tokenIDs accepts null, an int or a list of ints.
func tokenIDs(field string, raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		if one < 0 {
			return nil, fmt.Errorf("%w: %s must not be negative", ErrConfig, field)
		}
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("%w: %s must be an int or a list of ints", ErrConfig, field)
	}
	for _, id := range many {
		if id < 0 {
			return nil, fmt.Errorf("%w: %s must not be negative", ErrConfig, field)
		}
	}
	return many, nil
}

// QDim is the width of the query projection (heads × head_dim).
func (c *Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of the key (and value) projection.
func (c *Config) KVDim() int { return c.KVHeads * c.HeadDim }

// InvFreq returns RoPE's inverse frequencies for head_dim/2 rotary pairs,
// with rope_scaling applied as transformers does.
func (c *Config) InvFreq() []float64 {
	half := c.HeadDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))
	}
	s := c.RopeScaling
	switch s.Type {
	case "linear":
		for i := range inv {
			inv[i] /= s.Factor
		}
	case "llama3":
		old := float64(s.OriginalMaxPositionEmbeddings)
		lowWavelen := old / s.LowFreqFactor
		highWavelen := old / s.HighFreqFactor
		for i, f := range inv {
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < highWavelen:
				// high frequency: unchanged
			case wavelen > lowWavelen:
				inv[i] = f / s.Factor
			default:
				smooth := (old/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				inv[i] = (1-smooth)*f/s.Factor + smooth*f
			}
		}
	}
	return inv
}

// KVBytesPerToken is the KV cache size of one token over all layers for an
// element size in bytes.
func (c *Config) KVBytesPerToken(elemBytes int) int {
	return 2 * c.Layers * c.KVDim() * elemBytes
}
