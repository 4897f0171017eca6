package main

import (
	"flag"

	"github.com/gearboxlm/gearbox/specdecode"
)

// specFlag is --speculative-config: vLLM's JSON, parsed and validated as
// the flag is set.
type specFlag struct{ specdecode.Config }

func (f *specFlag) String() string {
	if f == nil || f.Method == "" {
		return ""
	}
	return f.Config.String()
}

func (f *specFlag) Set(s string) error {
	c, err := specdecode.Parse(s)
	if err != nil {
		return err
	}
	f.Config = c
	return nil
}

// addSpecFlag registers --speculative-config on fs, set into f.
func addSpecFlag(fs *flag.FlagSet, f *specFlag) {
	fs.Var(f, "speculative-config", `speculative decoding, as vLLM's JSON: {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": N, "prompt_lookup_max": M} drafts up to K tokens from an earlier occurrence of the last N..M tokens; outputs are unchanged (default: off)`)
}
