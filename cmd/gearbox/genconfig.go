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
		var o struct {
			Temperature       *float64 `json:"temperature"`
			TopP              *float64 `json:"top_p"`
			TopK              *int     `json:"top_k"`
			MinP              *float64 `json:"min_p"`
			RepetitionPenalty *float64 `json:"repetition_penalty"`
		}
		dec := json.NewDecoder(strings.NewReader(f.override))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return nil, fmt.Errorf("--override-generation-config: %w (it takes temperature, top_p, top_k, min_p and repetition_penalty)", err)
		}
		for _, p := range []struct{ dst, src **float64 }{{&d.Temperature, &o.Temperature}, {&d.TopP, &o.TopP}, {&d.MinP, &o.MinP}, {&d.RepetitionPenalty, &o.RepetitionPenalty}} {
			if *p.src != nil {
				*p.dst = *p.src
			}
		}
		if o.TopK != nil {
			d.TopK = o.TopK
		}
	}
	if *d == (server.SamplingDefaults{}) {
		return nil, nil
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("default sampling parameters (--generation-config %s): %w", f.source, err)
	}
	var parts []string
	add := func(name string, v any) { parts = append(parts, fmt.Sprintf("%s=%v", name, v)) }
	for _, p := range []struct {
		name string
		v    *float64
	}{{"temperature", d.Temperature}, {"top_p", d.TopP}, {"min_p", d.MinP}, {"repetition_penalty", d.RepetitionPenalty}} {
		if p.v != nil {
			add(p.name, *p.v)
		}
	}
	if d.TopK != nil {
		add("top_k", *d.TopK)
	}
	logger.Warn("default sampling parameters come from the model's generation config; requests that leave them out get these (--generation-config vllm: OpenAI's defaults)", "defaults", strings.Join(parts, " "))
	return d, nil
}
