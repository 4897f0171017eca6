package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sched"
)

// SiDPModes says which mode a SiDP run uses: the orchestrator's choice
// every iteration (Auto), or one mode throughout.
type SiDPModes uint8

const (
	AutoMode SiDPModes = iota // WaS ⇄ CaS by the orchestrator (§4.3)
	OnlyWaS
	OnlyCaS
	OnlyFSDP
)

// Orchestrator parameters the paper leaves open (§4.3 gives only their
// purpose: switch on a persistent drop below B_th, with hysteresis,
// "empirically minute-level at the tail").
const (
	// DefaultSiDPHysteresis is the half-width of the band around B_th as a
	// fraction of it: CaS below B_th·(1−h), WaS again at B_th·(1+h).
	DefaultSiDPHysteresis = 0.1
	// DefaultSiDPPersistence is how long, in seconds of the job, the batch
	// must stay beyond the band before the group switches.
	DefaultSiDPPersistence = 5.0
	// DefaultSiDPThresholdContext is the context (tokens) at which B_th is
	// profiled when SiDPRunOptions.Threshold is 0.
	DefaultSiDPThresholdContext = 2048
)

// SiDPRunOptions describe one simulated SiDP job.
type SiDPRunOptions struct {
	Model *model.Config
	Cost  *CostModel
	SiDP  SiDP
	// Sched holds each replica engine's limits, as RunOptions.Sched.
	Sched     sched.Config
	BlockSize int     // KV block size; default 16
	Memory    float64 // --gpu-memory-utilization; 0 means GPUMemoryUtilization
	// Requests are sharded over the replicas round-robin (request i on
	// replica i mod N), each shard served by its own engine; arrivals are
	// honoured (an offline job has them all at 0).
	Requests []bench.Request
	Modes    SiDPModes
	// Threshold is B_th, the per-replica batch (tokens of one step, the
	// busiest replica's) below which the group moves to CaS; 0 profiles
	// it on the cost model (SiDPCost.ProfiledThreshold) at
	// DefaultSiDPThresholdContext.
	Threshold   int
	Hysteresis  float64 // 0 means DefaultSiDPHysteresis; negative means none
	Persistence float64 // seconds; 0 means DefaultSiDPPersistence; negative means none
	Report      bench.ReportOptions
	Logger      *slog.Logger // switches are logged here; nil discards
}

// SiDPSwitch is one switch of the whole group between modes.
type SiDPSwitch struct {
	At    float64 // seconds into the job
	To    SiDPMode
	Batch int // the busiest replica's step tokens when it switched
}

// SiDPRunResult is what a SiDP job produced.
type SiDPRunResult struct {
	RunResult
	Threshold int          // B_th in use
	Switches  []SiDPSwitch // in order
	// Iterations is the replicas' steps with work by mode (index by
	// SiDPMode): in WaS each replica's own, in CaS and FSDP every busy
	// replica's share of a lockstep iteration (dummies not counted).
	Iterations  [3]int
	Tokens      [3]int64   // tokens those steps ran, by mode
	Busy        [3]float64 // replica-seconds of those steps, by mode
	ModeSeconds [3]float64 // job time by mode
	// Stall is the time beyond compute and the engine's overhead: in WaS
	// each replica's wait for its copies, summed over its steps; in CaS and
	// FSDP the slowest replica's communication and barriers, summed over
	// the lockstep iterations.
	Stall float64
}

// RunSiDP simulates a job on a SiDP group: N engines (engine.Engine with
// its scheduler, each over its own KV pool sized by SiDPMemory). In WaS
// they are independent: the engine furthest behind schedules its next
// batch, SiDPCost.ReplicaWaS prices it and only its clock moves, and the
// orchestrator watches the busiest engine's latest batch. When the
// orchestrator moves the group to CaS, the group waits for the last
// engine's step to end and then steps in lockstep: every engine with work
// schedules its batch, idle ones run a dummy iteration, the group's
// SiDPCost.Iteration prices it, and every engine's clock moves to its end;
// back in WaS each engine continues on its own clock.
func RunSiDP(opts SiDPRunOptions) (*SiDPRunResult, error) {
	if opts.Model == nil || opts.Cost == nil {
		return nil, errors.New("sim: a model and a cost model are required")
	}
	if opts.BlockSize == 0 {
		opts.BlockSize = 16
	}
	log := opts.Logger
	if log == nil {
		log = quiet
	}
	sc, err := opts.Cost.NewSiDPCost(opts.Model, opts.SiDP)
	if err != nil {
		return nil, err
	}
	s := sc.Config()
	kv, _, err := opts.Cost.SiDPKVCapacity(opts.Model, s, MemoryOptions{
		MaxBatchedTokens: opts.Sched.MaxNumBatchedTokens, MaxSeqs: opts.Sched.MaxNumSeqs, Utilization: opts.Memory,
	})
	if err != nil {
		return nil, err
	}
	blocks := int(kv[0] / int64(opts.BlockSize))
	if blocks < 1 {
		return nil, fmt.Errorf("sim: SiDP %d×TP%d leaves no memory for the KV cache of %d-token blocks", s.Replicas, s.TP, opts.BlockSize)
	}
	res := &SiDPRunResult{RunResult: RunResult{KVTokens: kv[0]}, Threshold: opts.Threshold}
	if res.Threshold == 0 && opts.Modes == AutoMode {
		if res.Threshold, err = sc.ProfiledThreshold(DefaultSiDPThresholdContext, 1<<12); err != nil {
			return nil, err
		}
	}
	orch := newOrchestrator(opts, res.Threshold)

	placements := policy.NewStatic(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: s.TP}).Placements()
	reps := make([]*replica, s.Replicas)
	runners := make([]*lockstepRunner, s.Replicas)
	for i := range reps {
		r := &replica{id: i, clk: clock.NewFake(epoch), live: map[*engine.Stream]*track{}}
		if r.runner, err = NewCostRunner(opts.Cost, opts.Model, placements, opts.BlockSize, blocks, r.clk); err != nil {
			return nil, err
		}
		runners[i] = &lockstepRunner{CostRunner: r.runner}
		r.eng, err = engine.NewEngine(engine.Options{
			Exec: runners[i], Clock: r.clk, Sched: opts.Sched, Logger: quiet,
			OnEvent: func(st *engine.Stream) { r.ready = append(r.ready, st) },
		})
		if err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		reps[i] = r
	}
	tracks := make([]*track, len(opts.Requests))
	pending := make([][]*track, s.Replicas) // by replica, in arrival order
	for i, rq := range opts.Requests {
		tracks[i] = &track{req: rq, arrival: rq.Arrival}
		pending[i%s.Replicas] = append(pending[i%s.Replicas], tracks[i])
	}
	for _, p := range pending {
		sortByArrival(p)
	}

	ctx := context.Background()
	seqs := make([][]Seq, s.Replicas)
	// In WaS every replica steps on its own clock (SiDPCost.ReplicaWaS);
	// CaS and FSDP run the group in lockstep from now.
	clocks := make([]time.Duration, s.Replicas)
	last := make([]int, s.Replicas)  // tokens of each replica's latest WaS step
	idle := make([]bool, s.Replicas) // no work and nothing left to arrive
	cold := make([]bool, s.Replicas) // its WaS slots are empty
	for i := range cold {
		cold[i] = true
	}
	admit := func(i int, now time.Duration) {
		for len(pending[i]) > 0 && pending[i][0].arrival <= now {
			t := pending[i][0]
			pending[i] = pending[i][1:]
			if err := reps[i].submit(t, opts.Model.Vocab); err != nil {
				t.failed = failure(err)
			}
		}
	}
	step := func(i int, now time.Duration) (int, error) {
		r, lr := reps[i], runners[i]
		r.clk.Set(epoch.Add(now))
		lr.seqs = lr.seqs[:0]
		if _, err := r.eng.Iterate(ctx); err != nil {
			return 0, fmt.Errorf("sim: %w", err)
		}
		seqs[i] = lr.seqs
		n := 0
		for _, q := range lr.seqs {
			n += q.New
		}
		return n, nil
	}
	note := func(mode SiDPMode, start, end time.Duration, tokens, steps int, st SiDPStep) {
		res.Steps += steps
		res.Iterations[mode] += steps
		res.Tokens[mode] += int64(tokens)
		res.Busy[mode] += float64(steps) * (end - start).Seconds()
		res.noteMode(mode, start.Seconds(), end.Seconds())
		res.Stall += st.Stall
		res.addTokens(start.Seconds(), end.Seconds(), tokens)
	}
	var now time.Duration
	for {
		if orch.mode == WaS {
			// The replica furthest behind takes its next step.
			i := -1
			for j := range reps {
				if !idle[j] && (i < 0 || clocks[j] < clocks[i]) {
					i = j
				}
			}
			if i < 0 {
				break
			}
			t0 := clocks[i]
			admit(i, t0)
			n, err := step(i, t0)
			if err != nil {
				return nil, err
			}
			if n == 0 {
				last[i] = 0
				if len(pending[i]) > 0 {
					clocks[i] = max(t0, pending[i][0].arrival)
				} else {
					idle[i] = true
				}
				continue
			}
			last[i] = n
			active := 0
			for j := range reps {
				if !idle[j] {
					active++
				}
			}
			orch.decide(t0.Seconds(), slices.Max(last))
			st := sc.ReplicaWaS(i, seqs[i], cold[i], active)
			cold[i] = false
			end := t0 + duration(st.Seconds)
			reps[i].clk.Set(epoch.Add(end))
			reps[i].collect(t0, end)
			note(WaS, t0, end, n, 1, st)
			clocks[i] = end
			if sw, ok := orch.switched(); ok {
				// The directive reaches every replica at the end of its
				// step; the group then runs in lockstep.
				res.Switches = append(res.Switches, sw)
				log.Info("sidp mode switch", "at_s", sw.At, "to", sw.To.String(), "batch", sw.Batch, "threshold", res.Threshold)
				now = slices.Max(clocks)
			}
			continue
		}

		// Arrivals up to now; the earliest pending one if every engine idles.
		busy := false
		next := time.Duration(math.MaxInt64)
		for i := range reps {
			admit(i, now)
			if len(pending[i]) > 0 {
				next = min(next, pending[i][0].arrival)
			}
		}
		tokens, batch, working := 0, 0, 0
		for i := range reps {
			n, err := step(i, now)
			if err != nil {
				return nil, err
			}
			last[i] = n
			tokens += n
			batch = max(batch, n)
			if n > 0 {
				working++
			}
			busy = busy || n > 0
		}
		if !busy {
			if next == time.Duration(math.MaxInt64) {
				break
			}
			now = next
			continue
		}
		mode := orch.decide(now.Seconds(), batch)
		if sw, ok := orch.switched(); ok {
			res.Switches = append(res.Switches, sw)
			log.Info("sidp mode switch", "at_s", sw.At, "to", sw.To.String(), "batch", sw.Batch, "threshold", res.Threshold)
		}
		st, err := sc.Iteration(mode, seqs)
		if err != nil {
			return nil, err
		}
		end := now + duration(st.Seconds)
		for _, r := range reps {
			r.clk.Set(epoch.Add(end))
			r.collect(now, end)
		}
		note(mode, now, end, tokens, working, st)
		now = end
		if mode == WaS { // back from CaS: every replica on its own clock again
			for i := range reps {
				clocks[i], idle[i], cold[i] = now, false, false
			}
		}
	}
	for _, span := range res.Timeline {
		for m := range res.ModeSeconds {
			if span.Plan == SiDPMode(m).String() {
				res.ModeSeconds[m] += span.End - span.Start
			}
		}
	}
	for _, r := range reps {
		res.Preemptions += r.eng.Stats().Preemptions
	}
	res.Report, res.SimDuration = report(tracks, opts.Report)
	return res, nil
}

// noteMode extends the timeline's last span when the mode did not change,
// or starts a span named after the mode; the spans are the group's
// (Replica 0 stands for every replica).
func (r *SiDPRunResult) noteMode(mode SiDPMode, start, end float64) {
	if n := len(r.Timeline); n > 0 && r.Timeline[n-1].Plan == mode.String() {
		r.Timeline[n-1].End = max(r.Timeline[n-1].End, end)
		r.Timeline[n-1].Steps++
		return
	}
	r.Timeline = append(r.Timeline, PlanSpan{Plan: mode.String(), Start: start, End: end, Steps: 1})
}

func sortByArrival(ts []*track) {
	for i := 1; i < len(ts); i++ { // insertion sort: shards arrive nearly sorted
		for j := i; j > 0 && ts[j].arrival < ts[j-1].arrival; j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// orchestrator is §4.3's job orchestrator: one mode for the whole group,
// WaS while the busiest replica's batch stays at or above B_th; CaS once
// it has stayed below B_th·(1−h) for the persistence window; WaS again
// once it has stayed at or above B_th·(1+h) as long.
type orchestrator struct {
	fixed     SiDPModes
	lo, hi    float64
	persist   float64
	mode      SiDPMode
	since     float64 // when the batch first crossed the band; −1: it has not
	justMoved *SiDPSwitch
}

func newOrchestrator(opts SiDPRunOptions, threshold int) *orchestrator {
	h := opts.Hysteresis
	if h == 0 {
		h = DefaultSiDPHysteresis
	}
	h = max(h, 0)
	p := opts.Persistence
	if p == 0 {
		p = DefaultSiDPPersistence
	}
	o := &orchestrator{fixed: opts.Modes, lo: float64(threshold) * (1 - h), hi: float64(threshold) * (1 + h), persist: max(p, 0), since: -1}
	switch opts.Modes {
	case OnlyCaS:
		o.mode = CaS
	case OnlyFSDP:
		o.mode = FSDP
	}
	return o
}

// decide returns the mode of the iteration starting at now (seconds)
// whose busiest replica runs batch tokens.
func (o *orchestrator) decide(now float64, batch int) SiDPMode {
	o.justMoved = nil
	if o.fixed != AutoMode {
		return o.mode
	}
	b := float64(batch)
	crossed := (o.mode == WaS && b < o.lo) || (o.mode == CaS && b >= o.hi)
	switch {
	case !crossed:
		o.since = -1
	case o.since < 0:
		o.since = now
	}
	if crossed && now-o.since >= o.persist {
		o.mode = CaS + WaS - o.mode
		o.since = -1
		o.justMoved = &SiDPSwitch{At: now, To: o.mode, Batch: batch}
	}
	return o.mode
}

// switched reports the switch the latest decide made, if any.
func (o *orchestrator) switched() (SiDPSwitch, bool) {
	if o.justMoved == nil {
		return SiDPSwitch{}, false
	}
	return *o.justMoved, true
}

// lockstepRunner is a replica's runner in a SiDP group: it records the
// step's sequences for the group's cost and leaves the clock alone (the
// driver moves every replica's clock to the iteration's end).
type lockstepRunner struct {
	*CostRunner
	seqs []Seq
}

func (r *lockstepRunner) record(b *forward.Batch) {
	for j := range b.Seqs {
		s := &b.Seqs[j]
		r.seqs = append(r.seqs, Seq{Context: s.Pos, New: len(s.Tokens), Logits: s.NumLogits})
	}
	r.steps++
}

// Step records b and returns zero logits, one row per logits row.
func (r *lockstepRunner) Step(_ context.Context, b *forward.Batch, _ parallel.Placement) ([]float32, error) {
	r.record(b)
	n := b.NumLogits() * r.cfg.Vocab
	if cap(r.logits) < n {
		r.logits = make([]float32, n)
	}
	r.logits = r.logits[:n]
	clear(r.logits)
	return r.logits, nil
}

// StepGreedy records b and returns CostRunner.StepGreedy's token ids.
func (r *lockstepRunner) StepGreedy(_ context.Context, b *forward.Batch, _ parallel.Placement) ([]int, error) {
	r.record(b)
	r.ids = r.ids[:0]
	for i := range b.Seqs {
		for range b.Seqs[i].NumLogits {
			r.ids = append(r.ids, (1+i%7)%r.cfg.Vocab)
		}
	}
	return r.ids, nil
}

var _ engine.GreedyRunner = (*lockstepRunner)(nil)

// OfflineJob is an offline job of n requests, all arriving at 0, whose
// prompt and output each average half of meanTokens (the paper's
// "average 1K/2K/4K" datasets; which part is prompt is not stated). Prompt
// lengths are log-normal with σ = 0.5; output lengths are log-normal with
// σ = 1.2816, at which the longest 10% of the outputs hold half the
// output tokens (the paper's §3.2, citing RLHFuse: 10% of the samples can
// take half the generation time). A request is cut to maxLen tokens, and
// to 4·meanTokens (8 times the mean output) so that one sample cannot be
// the whole job; the longest 10% then hold 46% of the output tokens.
func OfflineJob(n, meanTokens, maxLen int, seed uint64) []bench.Request {
	const promptSigma, outputSigma = 0.5, 1.2816
	rng := rand.New(rand.NewPCG(seed, 1))
	draw := func(mean, sigma float64) int {
		mu := math.Log(mean) - sigma*sigma/2
		return max(1, int(math.Round(math.Exp(mu+sigma*rng.NormFloat64()))))
	}
	limit := min(maxLen, 4*meanTokens)
	reqs := make([]bench.Request, n)
	for i := range reqs {
		in := min(draw(float64(meanTokens)/2, promptSigma), limit/2)
		out := min(draw(float64(meanTokens)/2, outputSigma), limit-in)
		reqs[i] = bench.Request{Index: i, InputTokens: in, OutputTokens: max(1, out)}
	}
	return reqs
}
