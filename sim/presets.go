package sim

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/gearboxlm/gearbox/model"
)

// presetFS holds the model presets: for each Hugging Face id, the fields
// of its config.json that model.ParseConfig reads (architecture, sizes,
// heads, head_dim, vocabulary, context length, RoPE, tying, special
// tokens, dtype), copied from the repository's config.json. The file of
// "org/name" is presets/org--name.json.
//
//go:embed presets/*.json
var presetFS embed.FS

// Models lists the preset Hugging Face ids, sorted.
func Models() []string {
	entries, err := fs.ReadDir(presetFS, "presets")
	if err != nil {
		return nil // the embedded directory always exists
	}
	var out []string
	for _, e := range entries {
		out = append(out, strings.Replace(strings.TrimSuffix(e.Name(), ".json"), "--", "/", 1))
	}
	slices.Sort(out)
	return out
}

// LookupModel returns the config of a model named the way vLLM's --model
// takes it: a preset's Hugging Face id (case-insensitive, e.g.
// "meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-32B"), or a directory
// holding a config.json (only the config is read; no weights are needed).
// A preset is parsed by model.ParseConfig, so it is validated like a
// checkpoint's config.
func LookupModel(name string) (*model.Config, error) {
	if st, err := os.Stat(name); err == nil && st.IsDir() {
		return model.LoadConfig(name)
	} else if err == nil || !errors.Is(err, os.ErrNotExist) {
		if err == nil {
			err = fmt.Errorf("%s is not a directory", name)
		}
		return nil, fmt.Errorf("sim: model %q: %w", name, err)
	}
	for _, id := range Models() {
		if strings.EqualFold(id, strings.TrimSpace(name)) {
			data, err := presetFS.ReadFile("presets/" + strings.Replace(id, "/", "--", 1) + ".json")
			if err != nil {
				return nil, fmt.Errorf("sim: preset %s: %w", id, err)
			}
			cfg, err := model.ParseConfig(data)
			if err != nil {
				return nil, fmt.Errorf("sim: preset %s: %w", id, err)
			}
			return cfg, nil
		}
	}
	return nil, fmt.Errorf("sim: model %q is neither a directory with config.json nor a preset (presets: %s)",
		name, strings.Join(Models(), ", "))
}
