package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/gearboxlm/gearbox/parallel"
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
	fs.Var(f, "speculative-config", `speculative decoding, as vLLM's JSON: {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": N, "prompt_lookup_max": M} drafts up to K tokens from an earlier occurrence of the last N..M tokens; {"method": "draft_model", "model": DIR, "num_speculative_tokens": K} drafts K tokens greedily with a smaller model of the same vocabulary on one rank; outputs are unchanged (default: off)`)
}

// draftRunner loads the draft model of the draft_model method with the
// target's device flags and builds its one-rank runner; nil for the other
// methods. Its KV pool is sized as the CPU's default pool is (target's
// most sequences at the context both models take, at most 4 GiB) on
// either device, so that it is built before the target's runner, which on
// a GPU then takes its share of memory from what is left.
func (f *specFlag) draftRunner(dev *deviceFlags, target runnerSpec, logger *slog.Logger) (*built, error) {
	if f.Method != specdecode.DraftModel {
		return nil, nil
	}
	m, err := dev.loadModel(f.Model, nil)
	if err != nil {
		return nil, fmt.Errorf("draft model: %w", err)
	}
	maxLen := m.Config.MaxPositions
	if target.maxModelLen > 0 {
		maxLen = min(maxLen, target.maxModelLen)
	}
	kv, err := dev.kvCacheDType()
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	// kv.Tensor() of auto is float32: a GPU's 16-bit cache takes half the bytes.
	spec := runnerSpec{placements: []parallel.Placement{parallel.Standard(parallel.Single)}, blockSize: target.blockSize,
		numBlocks: cpuKVBlocks(m.Config, kv.Tensor(), target.blockSize, maxLen, target.maxSeqs),
		maxTokens: target.maxTokens, maxSeqs: target.maxSeqs, maxModelLen: maxLen}
	b, err := dev.newRunner(m, spec, logger)
	if err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("draft model: %w", err)
	}
	return b, nil
}
