package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/safetensors"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/specdecode"
	"github.com/gearboxlm/gearbox/tensor"
)

// draftPair writes a target model whose layers after the first add
// little to the residual stream (their output projections scaled by
// 0.02) and a draft model that is the target without them: the shape of
// a trained pair, a draft that agrees with its target most of the time
// at a fraction of its cost, built from random weights. The target costs
// what its size says; only its agreement with the draft is arranged.
func draftPair(tb testing.TB, spec fixture.Spec) (target, draft string) {
	tb.Helper()
	dir := tb.TempDir()
	target, draft = filepath.Join(dir, "target"), filepath.Join(dir, "draft")
	one := spec
	one.Layers = 1
	for _, w := range []struct {
		dir  string
		spec fixture.Spec
	}{{target, spec}, {draft, one}} {
		if err := os.Mkdir(w.dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := fixture.Write(w.dir, w.spec); err != nil {
			tb.Fatal(err)
		}
	}
	all := spec.Tensors()
	var first []safetensors.WriteTensor
	for i, t := range all {
		if strings.HasPrefix(t.Name, "model.layers.") && !strings.HasPrefix(t.Name, "model.layers.0.") {
			if strings.HasSuffix(t.Name, "o_proj.weight") || strings.HasSuffix(t.Name, "down_proj.weight") {
				data := slices.Clone(t.Data)
				for j := range data {
					data[j] *= 0.02
				}
				all[i].Data = data
			}
			continue
		}
		first = append(first, t)
	}
	for _, w := range []struct {
		dir     string
		tensors []safetensors.WriteTensor
	}{{target, all}, {draft, first}} {
		if err := safetensors.WriteFile(filepath.Join(w.dir, "model.safetensors"), w.tensors, map[string]string{"format": "pt"}); err != nil {
			tb.Fatal(err)
		}
	}
	return target, draft
}

// BenchmarkDraftModel decodes greedily on the CPU with and without a
// draft model (draftPair: an 8-layer target of 27M parameters, its
// 1-layer draft), one request at a time and eight at once, and reports
// generated tokens per second and the share of draft tokens kept.
func BenchmarkDraftModel(b *testing.B) {
	spec := fixture.Spec{Hidden: 512, Intermediate: 1536, Layers: 8, Heads: 8, Vocab: 512, MaxPositions: 1024, Seed: 5}
	targetDir, draftDir := draftPair(b, spec)
	target, err := model.Load(targetDir, model.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer target.Close()
	draft, err := model.Load(draftDir, model.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer draft.Close()
	pool := tensor.NewPool(0)
	defer pool.Close()
	for _, batch := range []int{1, 8} {
		for _, k := range []int{0, 2, 4} {
			b.Run(fmt.Sprintf("batch=%d/drafts=%d", batch, k), func(b *testing.B) {
				exec, err := cpuexec.NewExecutor(target.Config, target.Weights, cpuexec.Options{NumBlocks: 8 * 64, Pool: pool})
				if err != nil {
					b.Fatal(err)
				}
				opts := Options{Exec: exec, Sched: sched.Config{MaxNumSeqs: batch}}
				if k > 0 {
					if opts.DraftRunner, err = cpuexec.NewExecutor(draft.Config, draft.Weights, cpuexec.Options{NumBlocks: 8 * 64, Pool: pool}); err != nil {
						b.Fatal(err)
					}
					opts.Speculative = specdecode.Config{Method: specdecode.DraftModel, NumTokens: k, Model: draftDir}
				}
				e, err := NewEngine(opts)
				if err != nil {
					b.Fatal(err)
				}
				defer e.Start()()
				reqs := make([]Request, batch)
				tokens := 0
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					for j := range reqs {
						reqs[j] = Request{ID: fmt.Sprint(i, "-", j), Prompt: fixture.Tokens(i*batch+j, 32, spec.Vocab), MaxTokens: 128, IgnoreEOS: true, Sampling: sample.Params{}}
					}
					for _, out := range generateAll(b, e, reqs) {
						tokens += len(out.Tokens)
					}
				}
				b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
				if st := e.Stats(); st.DraftTokens > 0 {
					b.ReportMetric(float64(st.AcceptedTokens)/float64(st.DraftTokens), "kept")
				}
			})
		}
	}
}
