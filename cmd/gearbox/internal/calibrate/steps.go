package calibrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/tensor"
)

// ValidationShape is the model the validations run: a random-weight
// Llama of 4 layers with Llama-3-8B's heads (8 query and 2 KV heads of
// 128) on a hidden size of 1024, about 180 M parameters in the layers
// (45 MB a layer in float32, so a step reads its weights from memory, not
// the cache) and a 32000-token vocabulary, Llama-2's. Its kernels, not
// Go's per-call overheads, dominate its steps.
var ValidationShape = Shape{Hidden: 1024, Intermediate: 2816, Layers: 4, Heads: 8, KVHeads: 2, HeadDim: 128, Vocab: 32000, MaxPositions: 4096}

// StepCase is one step of the sweep: a prefill of Tokens tokens of one
// new sequence, or a decode of Tokens sequences at Context tokens of
// context each, under Plan.
type StepCase struct {
	Plan    parallel.Plan
	Decode  bool
	Tokens  int // prefill tokens, or decode batch
	Context int // decode: tokens already cached per sequence
}

// String is e.g. "prefill 256" or "decode 16 @ 512".
func (c StepCase) String() string {
	if c.Decode {
		return fmt.Sprintf("decode %d @ %d", c.Tokens, c.Context)
	}
	return fmt.Sprintf("prefill %d", c.Tokens)
}

// StepResult is one case measured on the engine and predicted by the
// cost model.
type StepResult struct {
	StepCase
	Measured  float64 // seconds, median of the rounds
	Predicted float64 // seconds, sim.LayoutCost.Step with the profile
	// Parts is the predicted busiest rank's time by component, seconds.
	Parts [sim.NumComponents]float64
	// Catalog is the prediction with StepOptions.Catalog instead of the
	// profile, seconds; 0 without one.
	Catalog float64
}

// Error is the prediction's relative error, (predicted − measured) /
// measured.
func (r StepResult) Error() float64 { return (r.Predicted - r.Measured) / r.Measured }

// CatalogError is the catalog prediction's relative error.
func (r StepResult) CatalogError() float64 { return (r.Catalog - r.Measured) / r.Measured }

// StepOptions configure ValidateSteps. Zero fields take the defaults
// noted; the defaults of a GPU profile (sim.Profile.IsGPU) are the GPU
// sweep's.
type StepOptions struct {
	Threads int   // CPU kernel threads, as the profile's; 0: the profile's Threads (all cores for a GPU profile, for the weights)
	Shape   Shape // default ValidationShape
	// Model, when set, is the model to run instead of Shape: a real
	// model's shape from ModelShape.
	Model *model.Config
	// Runners builds the executors; nil runs the CPU engine with a kernel
	// pool of Threads. A GPU profile needs GPU runners (GPURunners).
	Runners Runners
	// Catalog, when set, is a catalog GPU (MatchGPU's entry for the
	// profiled device) that predicts every case too, in the profile's
	// precision, into StepResult.Catalog.
	Catalog *sim.GPU
	// Plans default to single, tp=2 and sp=2 on the CPU and to single on
	// a GPU (whose executor runs a plan's ranks one after another on the
	// one device, which the cost model does not describe). Prefill
	// defaults to 16, 64, 256 and 1024 tokens on the CPU and adds 4096 on
	// a GPU; Decode to batches of 1, 4, 16 and 64 on the CPU and 1, 8, 64
	// and 256 on a GPU, at DecodeContext (default 512) tokens of context.
	Plans         []parallel.Plan
	Prefill       []int
	Decode        []int
	DecodeContext int
	Rounds        int // interleaved rounds per case, default 5
	// Weights is the format the CPU engine holds the matrices in:
	// tensor.F32 (the zero value), BF16 or F16, predicted with the
	// profile's curve for it; a GPU profile takes F32.
	Weights tensor.DType
	Log     io.Writer // one line per case; nil: silent
}

func (o *StepOptions) defaults(p *sim.Profile) error {
	gpu := p.IsGPU()
	if o.Threads == 0 {
		o.Threads = p.Threads
	}
	if o.Shape == (Shape{}) {
		o.Shape = ValidationShape
	}
	if len(o.Plans) == 0 {
		o.Plans = []parallel.Plan{parallel.Single, {DP: 1, PP: 1, SP: 1, TP: 2}, {DP: 1, PP: 1, SP: 2, TP: 1}}
		if gpu {
			o.Plans = []parallel.Plan{parallel.Single}
		}
	}
	if len(o.Prefill) == 0 {
		o.Prefill = []int{16, 64, 256, 1024}
		if gpu {
			o.Prefill = append(o.Prefill, 4096)
		}
	}
	if len(o.Decode) == 0 {
		o.Decode = []int{1, 4, 16, 64}
		if gpu {
			o.Decode = []int{1, 8, 64, 256}
		}
	}
	if o.DecodeContext == 0 {
		o.DecodeContext = 512
	}
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	if gpu {
		if o.Runners == nil {
			return fmt.Errorf("calibrate: profile of %s describes a GPU: validate it on GPU runners (GPURunners)", p.Name)
		}
		for _, plan := range o.Plans {
			if plan.Ranks() > 1 {
				return fmt.Errorf("calibrate: plan %s: the CUDA executor runs a plan's ranks one after another on one GPU, which the cost model does not describe; validate the single plan", plan)
			}
		}
	}
	return nil
}

// ValidateSteps runs every (plan, shape) case of opts on an executor from
// opts.Runners (by default the CPU engine, cpuexec.Executor with a kernel
// pool of opts.Threads) with random weights of opts.Model or opts.Shape,
// and predicts it with the cost model built from p alone: Node(p, ranks)
// and sim.NewCostModel(node, prec) in the engine's precision with
// opts.Weights (enginePrecision), and with opts.Catalog where
// set. Cases are measured in interleaved rounds and the medians kept.
func ValidateSteps(ctx context.Context, p *sim.Profile, opts StepOptions) (_ []StepResult, err error) {
	if err := opts.defaults(p); err != nil {
		return nil, err
	}
	cfg := opts.Model
	if cfg == nil {
		if cfg, err = opts.Shape.Config(); err != nil {
			return nil, err
		}
	}
	pool := tensor.NewPool(opts.Threads)
	defer pool.Close()
	runners := opts.Runners
	if runners == nil {
		runners = CPURunners(pool)
	}
	prec, err := enginePrecision(p, opts.Weights)
	if err != nil {
		return nil, err
	}
	w := randomWeights(cfg, pool, opts.Weights)

	var cases []StepCase
	for _, plan := range opts.Plans {
		for _, n := range opts.Prefill {
			cases = append(cases, StepCase{Plan: plan, Tokens: n})
		}
		for _, n := range opts.Decode {
			cases = append(cases, StepCase{Plan: plan, Decode: true, Tokens: n, Context: opts.DecodeContext})
		}
	}
	const bs = 16
	spec := RunnerSpec{BlockSize: bs}
	for _, c := range cases {
		if c.Decode {
			spec.NumBlocks = max(spec.NumBlocks, c.Tokens*((c.Context+1+bs-1)/bs))
			spec.MaxTokens, spec.MaxSeqs = max(spec.MaxTokens, c.Tokens), max(spec.MaxSeqs, c.Tokens)
			spec.MaxModelLen = max(spec.MaxModelLen, c.Context+1)
		} else {
			spec.NumBlocks = max(spec.NumBlocks, (c.Tokens+bs-1)/bs)
			spec.MaxTokens, spec.MaxSeqs = max(spec.MaxTokens, c.Tokens), max(spec.MaxSeqs, 1)
			spec.MaxModelLen = max(spec.MaxModelLen, c.Tokens)
		}
	}
	execs := map[parallel.Plan]engine.Runner{}
	layouts := map[parallel.Plan]*sim.LayoutCost{}
	catalog := map[parallel.Plan]*sim.LayoutCost{}
	for _, plan := range opts.Plans {
		spec.Plan = plan
		exec, release, err := runners(cfg, w, spec)
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, release()) }()
		execs[plan] = exec
		if layouts[plan], err = layoutCost(p, prec, cfg, plan); err != nil {
			return nil, err
		}
		if opts.Catalog != nil {
			node, err := sim.NewNode(*opts.Catalog, plan.Ranks())
			if err != nil {
				return nil, err
			}
			if catalog[plan], err = layoutOn(node, prec, cfg, plan); err != nil {
				return nil, err
			}
		}
	}
	batches := make([]*forward.Batch, len(cases))
	for i, c := range cases {
		batches[i] = stepBatch(c, cfg, bs)
		if _, err := execs[c.Plan].Step(ctx, batches[i], parallel.Standard(c.Plan)); err != nil { // warm-up
			return nil, fmt.Errorf("calibrate: %s under %s: %w", c, c.Plan, err)
		}
	}
	t, err := rounds(ctx, opts.Rounds, len(cases), func(i int) (float64, error) {
		return timeStep(ctx, execs[cases[i].Plan], batches[i], cases[i].Plan)
	})
	if err != nil {
		return nil, err
	}
	out := make([]StepResult, len(cases))
	for i, c := range cases {
		lc := layouts[c.Plan]
		shape := stepShape(batches[i])
		step := lc.Step(&shape)
		r := StepResult{StepCase: c, Measured: t[i], Predicted: step.Seconds}
		bd := lc.StepTime(step.Slowest, &shape)
		for k := range r.Parts {
			r.Parts[k] = bd.Parts[k].Time
		}
		if cl := catalog[c.Plan]; cl != nil {
			r.Catalog = cl.Step(&shape).Seconds
		}
		out[i] = r
		if opts.Log != nil {
			line := fmt.Sprintf("%-8s %-16s measured %9.2f ms  predicted %9.2f ms  error %+6.1f%%",
				c.Plan, c, r.Measured*1e3, r.Predicted*1e3, 100*r.Error())
			if r.Catalog > 0 {
				line += fmt.Sprintf("  catalog %s %9.2f ms  error %+6.1f%%", opts.Catalog.Name, r.Catalog*1e3, 100*r.CatalogError())
			}
			fmt.Fprintln(opts.Log, line)
		}
	}
	return out, nil
}

// layoutCost is the cost model of p, in precision prec, bound to cfg
// under plan's standard layout, on a node of as many ranks as the plan
// has.
func layoutCost(p *sim.Profile, prec sim.Precision, cfg *model.Config, plan parallel.Plan) (*sim.LayoutCost, error) {
	node, err := Node(p, plan.Ranks())
	if err != nil {
		return nil, err
	}
	return layoutOn(node, prec, cfg, plan)
}

// enginePrecision is the precision of the engine p describes with its
// matrices in format: a GPU profile's (format must be tensor.F32: the GPU
// runners convert the weights themselves), or the CPU engine's with
// format's weights, which p must have measured.
func enginePrecision(p *sim.Profile, format tensor.DType) (sim.Precision, error) {
	if p.IsGPU() {
		if format != tensor.F32 {
			return sim.Precision{}, fmt.Errorf("calibrate: %s weights: a GPU profile is validated in its own precision (%s)", format, p.Precision())
		}
		return p.Precision(), nil
	}
	if format != tensor.F32 && format != tensor.BF16 && format != tensor.F16 && format != tensor.Q8_0 {
		return sim.Precision{}, fmt.Errorf("calibrate: %s weights: the simulator prices float32, bfloat16, float16 and Q8_0 matrices", format)
	}
	prec := sim.CPUPrecision
	prec.Weights = simDType(format)
	if err := p.CheckPrecision(prec); err != nil {
		return sim.Precision{}, fmt.Errorf("calibrate: %w", err)
	}
	return prec, nil
}

// layoutOn is the cost model of node in precision prec bound to cfg
// under plan's standard layout.
func layoutOn(node sim.Node, prec sim.Precision, cfg *model.Config, plan parallel.Plan) (*sim.LayoutCost, error) {
	cm, err := sim.NewCostModel(node, prec)
	if err != nil {
		return nil, err
	}
	return cm.Layout(cfg, parallel.Standard(plan))
}

// stepBatch is the engine batch of a case: a prefill starts a sequence
// at position 0 and wants the logits of its last token; decodes want one
// row each. The KV cache's contents do not change the time.
func stepBatch(c StepCase, cfg *model.Config, bs int) *forward.Batch {
	if !c.Decode {
		return &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokenRun(c.Tokens, cfg.Vocab), Blocks: blockRange(0, (c.Tokens+bs-1)/bs), NumLogits: 1}}}
	}
	per := (c.Context + 1 + bs - 1) / bs
	b := &forward.Batch{}
	for i := 0; i < c.Tokens; i++ {
		b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: []int{3 + i%(cfg.Vocab-3)}, Pos: c.Context, Blocks: blockRange(i*per, per), NumLogits: 1})
	}
	return b
}

// stepShape is the cost model's view of an engine batch.
func stepShape(b *forward.Batch) sim.StepShape {
	var s sim.StepShape
	for _, q := range b.Seqs {
		s.Seqs = append(s.Seqs, sim.Seq{Context: q.Pos, New: len(q.Tokens), Logits: q.NumLogits, Replica: q.Replica})
	}
	return s
}

// MedianAbsError is the median of |Error()| over results.
func MedianAbsError(results []StepResult) float64 {
	return medianAbs(results, StepResult.Error)
}

// MedianAbsCatalogError is the median of |CatalogError()| over results.
func MedianAbsCatalogError(results []StepResult) float64 {
	return medianAbs(results, StepResult.CatalogError)
}

func medianAbs(results []StepResult, rel func(StepResult) float64) float64 {
	errs := make([]float64, len(results))
	for i, r := range results {
		errs[i] = math.Abs(rel(r))
	}
	return median(errs)
}

// ByPlan splits results by plan, in the order the plans first appear.
func ByPlan(results []StepResult) [][]StepResult {
	var order []parallel.Plan
	groups := map[parallel.Plan][]StepResult{}
	for _, r := range results {
		if !slices.Contains(order, r.Plan) {
			order = append(order, r.Plan)
		}
		groups[r.Plan] = append(groups[r.Plan], r)
	}
	out := make([][]StepResult, len(order))
	for i, p := range order {
		out[i] = groups[p]
	}
	return out
}
