package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/lora"
	"github.com/gearboxlm/gearbox/model"
)

// loraFlags are vLLM's LoRA serving flags.
type loraFlags struct {
	enable      bool
	modules     loraModules
	maxRank     int
	runtimeFlag bool
}

// loraModule is one --lora-modules entry.
type loraModule struct{ name, path string }

// loraModules is --lora-modules, repeatable: name=path, several of them
// separated by spaces in one value, or vLLM's JSON object {"name": …,
// "path": …, "base_model_name": …}.
type loraModules []loraModule

func (m *loraModules) String() string {
	var parts []string
	for _, x := range *m {
		parts = append(parts, x.name+"="+x.path)
	}
	return strings.Join(parts, " ")
}

func (m *loraModules) Set(s string) error {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "{") {
		var j struct {
			Name string `json:"name"`
			Path string `json:"path"`
			Base string `json:"base_model_name"`
		}
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			return fmt.Errorf("--lora-modules: %w", err)
		}
		if j.Name == "" || j.Path == "" {
			return fmt.Errorf(`--lora-modules %s: "name" and "path" are required`, s)
		}
		*m = append(*m, loraModule{j.Name, j.Path})
		return nil
	}
	for _, f := range strings.Fields(s) {
		name, path, ok := strings.Cut(f, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("--lora-modules %q: want name=path", f)
		}
		*m = append(*m, loraModule{name, path})
	}
	return nil
}

func addLoRAFlags(fs *flag.FlagSet) *loraFlags {
	f := &loraFlags{}
	fs.BoolVar(&f.enable, "enable-lora", false, "serve LoRA adapters (--lora-modules) beside the model, on the CPU executor; requests name an adapter as their model")
	fs.Var(&f.modules, "lora-modules", `a LoRA adapter in PEFT's format to serve: name=DIR (repeatable, or several separated by spaces) or {"name": …, "path": …}`)
	fs.IntVar(&f.maxRank, "max-lora-rank", 16, "largest LoRA rank accepted")
	fs.BoolVar(&f.runtimeFlag, "allow-runtime-lora-updating", false, "serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (also on with vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING=true)")
	return f
}

// load reads the adapters for a model of config cfg, served under the
// names served;
// nil without --enable-lora (or without the flags: f nil). The CPU
// executor runs them under the static, shift and seesaw policies; check
// refuses the rest.
func (f *loraFlags) load(cfg *model.Config, served []string, logger *slog.Logger) ([]*lora.Adapter, error) {
	if f == nil {
		return nil, nil
	}
	if !f.enable {
		if len(f.modules) > 0 {
			return nil, fmt.Errorf("--lora-modules needs --enable-lora")
		}
		return nil, nil
	}
	if f.maxRank < 0 {
		return nil, fmt.Errorf("--max-lora-rank %d: want at least 1 (or 0: any)", f.maxRank)
	}
	seen := map[string]bool{}
	for _, n := range served {
		seen[n] = true
	}
	var out []*lora.Adapter
	for _, m := range f.modules {
		if seen[m.name] {
			return nil, fmt.Errorf("--lora-modules: the name %q is taken (by the model or another adapter)", m.name)
		}
		seen[m.name] = true
		a, err := lora.Load(m.name, m.path, cfg, f.maxRank)
		if err != nil {
			return nil, err
		}
		logger.Info("LoRA adapter", "name", a.Name, "path", a.Path, "rank", a.Rank, "bytes", a.Bytes(), "base", a.Base)
		out = append(out, a)
	}
	return out, nil
}

// check refuses what does not run adapters: the policies whose executors
// do not, ranks in other processes, and the GPU (whose executor has no
// LoRA kernels).
func (f *loraFlags) check(policy string, mpi bool) error {
	if f == nil || !f.enable {
		return nil
	}
	switch {
	case policy == "sidp" || policy == "csps" || policy == "nitsum":
		return fmt.Errorf("--enable-lora: --policy %s does not run LoRA adapters (static, shift and seesaw do)", policy)
	case mpi:
		return fmt.Errorf("--enable-lora: --transport mpi does not run LoRA adapters (the ranks in other processes hold none)")
	}
	return nil
}

// enabled reports --enable-lora.
func (f *loraFlags) enabled() bool { return f != nil && f.enable }

// runtime reports whether adapters may be loaded and unloaded over the
// API: --allow-runtime-lora-updating, or vLLM's environment variable
// VLLM_ALLOW_RUNTIME_LORA_UPDATING set to true or 1.
func (f *loraFlags) runtime() bool {
	if f.runtimeFlag {
		return true
	}
	v := strings.ToLower(strings.TrimSpace(os.Getenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING")))
	return v == "true" || v == "1"
}

// registry is the served adapters (loaded, installed in run as ids 1, 2,
// …) for the API, installing later ones in run and freeing unloaded ones
// once eng has no request with them.
func (f *loraFlags) registry(cfg *model.Config, served []string, loaded []*lora.Adapter, run engine.Runner, eng *engine.Engine) (*lora.Registry, error) {
	x, ok := run.(interface {
		SetAdapter(id int, a *lora.Adapter) error
	})
	if !ok {
		return nil, fmt.Errorf("--enable-lora: the executor runs no LoRA adapters")
	}
	release := func(id int) bool { return eng.FreeAdapter(id, func() error { return x.SetAdapter(id, nil) }) }
	return lora.NewRegistry(cfg, f.maxRank, x.SetAdapter, release, served, loaded), nil
}
