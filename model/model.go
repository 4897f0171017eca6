package model

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gearboxlm/gearbox/model/safetensors"
	"github.com/gearboxlm/gearbox/tensor"
	"github.com/gearboxlm/gearbox/tokenizer"
)

// Model is a loaded model: its config, weights and tokenizer.
type Model struct {
	Name       string // served name: the directory's base name by default
	Config     *Config
	Generation *GenerationConfig // nil when the directory has none
	Weights    *Weights
	Tokenizer  *tokenizer.Tokenizer
}

// Options tune loading.
type Options struct {
	// Progress, if not nil, is called as tensors are converted, with bytes
	// done and total bytes.
	Progress func(done, total int64)
	// DType is the format matrices are held in: DTypeAuto (the zero
	// value) keeps each matrix in its checkpoint dtype, viewing the
	// memory-mapped file where it can; Float32, BFloat16 and Float16
	// convert. Norms and biases are float32 whatever it says.
	DType DType
	// Quantization Int8 quantizes every matrix to Q8_0 at load, from the
	// checkpoint's values; DType must then be auto or float32 (Check).
	Quantization Quantization
	// Pool splits conversions and quantization over its threads; nil runs
	// them on the caller.
	Pool *tensor.Pool
}

// Load reads a Hugging Face model directory: config.json (and
// generation_config.json), *.safetensors (single file or sharded with an
// index), tokenizer.json and tokenizer_config.json. Weights are held as
// opts says (LoadWeights); when matrices view the memory-mapped
// safetensors files, those stay open until Close, otherwise they are
// closed before Load returns.
func Load(dir string, opts Options) (*Model, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("model: %s is not a directory", dir)
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	gen, err := LoadGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	tok, err := loadTokenizer(dir)
	if err != nil {
		return nil, err
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	w, err := LoadWeights(cfg, set, opts)
	if err != nil {
		set.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if !w.Views() {
		if err := set.Close(); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	}
	m := &Model{Name: filepath.Base(filepath.Clean(dir)), Config: cfg, Generation: gen, Weights: w, Tokenizer: tok}
	if err := m.check(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func loadTokenizer(dir string) (*tokenizer.Tokenizer, error) {
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return nil, fmt.Errorf("model: missing tokenizer: %w", err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	return tok, nil
}

// LoadFS reads a model directory from a file system (such as an embedded
// one) with the default options; the weights must be a single
// model.safetensors.
func LoadFS(fsys fs.FS, name string) (*Model, error) {
	return LoadFSOptions(fsys, name, Options{})
}

// LoadFSOptions is LoadFS with options. Matrices kept in the file's
// dtype view the file's bytes read into memory.
func LoadFSOptions(fsys fs.FS, name string, opts Options) (*Model, error) {
	data, err := fs.ReadFile(fsys, "config.json")
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("model %s: config.json: %w", name, err)
	}
	var gen *GenerationConfig
	if data, err := fs.ReadFile(fsys, "generation_config.json"); err == nil {
		if gen, err = ParseGenerationConfig(data); err != nil {
			return nil, fmt.Errorf("model %s: generation_config.json: %w", name, err)
		}
		if len(gen.EOS) > 0 {
			cfg.EOS = gen.EOS
		}
	}
	tokJSON, err := fs.ReadFile(fsys, "tokenizer.json")
	if err != nil {
		return nil, fmt.Errorf("model %s: missing tokenizer: %w", name, err)
	}
	tokCfg, err := fs.ReadFile(fsys, "tokenizer_config.json")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	tok, err := tokenizer.New(tokJSON, tokCfg)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	blob, err := fs.ReadFile(fsys, "model.safetensors")
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	f, err := safetensors.Parse(name+"/model.safetensors", blob)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	set, err := safetensors.NewSet(f)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	w, err := LoadWeights(cfg, set, opts)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	m := &Model{Name: name, Config: cfg, Generation: gen, Weights: w, Tokenizer: tok}
	return m, m.check()
}

// Close releases the files the weights view (Weights.Close); the model
// must not run after it.
func (m *Model) Close() error { return m.Weights.Close() }

// check verifies that the tokenizer fits the embedding table.
func (m *Model) check() error {
	if n := m.Tokenizer.VocabSize(); n > m.Config.Vocab {
		return fmt.Errorf("model %s: tokenizer has %d tokens but vocab_size is %d", m.Name, n, m.Config.Vocab)
	}
	return nil
}

// EOS returns the token ids that end generation: the config's (or
// generation config's) eos_token_id, else the tokenizer's.
func (m *Model) EOS() []int {
	if len(m.Config.EOS) > 0 {
		return m.Config.EOS
	}
	return m.Tokenizer.EOS()
}
