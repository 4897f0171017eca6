package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/server"
)

// genConfigFlags are vLLM's --generation-config and
// --override-generation-config: where requests' default sampling
// parameters come from.
type genConfigFlags struct {
	source   string
	override string
}

func addGenConfigFlags(fs *flag.FlagSet) *genConfigFlags {
	f := &genConfigFlags{}
	fs.StringVar(&f.source, "generation-config", "auto", "default sampling parameters of requests that leave them out: auto (the model's generation_config.json: temperature, top_p, top_k, min_p, repetition_penalty), vllm (OpenAI's defaults), or a directory holding a generation_config.json")
	fs.StringVar(&f.override, "override-generation-config", "", `JSON of default sampling parameters over --generation-config's, e.g. {"temperature": 0.5}`)
	return f
}

// defaults resolves the flags for model m (nil: OpenAI's defaults) and
// logs them, as vLLM warns that the model's generation config changes
// its defaults.
func (f *genConfigFlags) defaults(m *model.Model, logger *slog.Logger) (*server.SamplingDefaults, error) {
	var g *model.GenerationConfig
	switch src := strings.TrimSpace(f.source); src {
	case "", "auto":
		g = m.Generation
	case "vllm":
	default:
		var err error
		if g, err = model.LoadGenerationConfig(src); err != nil {
			return nil, fmt.Errorf("--generation-config: %w", err)
		}
		if g == nil {
			return nil, fmt.Errorf("--generation-config %s: no generation_config.json there (auto reads the model's, vllm uses none)", src)
		}
	}
	d := &server.SamplingDefaults{}
	if g != nil {
		d.Temperature, d.TopP, d.TopK, d.MinP, d.RepetitionPenalty = g.Temperature, g.TopP, g.TopK, g.MinP, g.RepetitionPenalty
	}
	if f.override != "" {
		dec := json.NewDecoder(strings.NewReader(f.override))
		dec.DisallowUnknownFields()
		if err := dec.Decode(d); err != nil { // over d: the fields it names replace the file's
			return nil, fmt.Errorf("--override-generation-config: %w (it takes temperature, top_p, top_k, min_p and repetition_penalty)", err)
		}
	}
	if *d == (server.SamplingDefaults{}) {
		return nil, nil
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("default sampling parameters (--generation-config %s): %w", f.source, err)
	}
	shown, _ := json.Marshal(d)
	logger.Warn("default sampling parameters come from the model's generation config; requests that leave them out get these (--generation-config vllm: OpenAI's defaults)", "defaults", string(shown))
	return d, nil
}
