package sim

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/specdecode"
)

// RunOptions describe one simulated serving run.
type RunOptions struct {
	Model  *model.Config
	Cost   *CostModel
	Plan   parallel.Plan // the deployment; DP replicas are independent engines
	Policy policy.Policy // nil: every step under Plan (with DP 1)
	// Sched holds the per-engine limits (--max-num-batched-tokens,
	// --max-num-seqs, prefix caching, --max-waiting); block geometry and
	// context length come from the memory model and the model.
	Sched     sched.Config
	BlockSize int // KV block size; default 16
	// Requests, with Arrival set (offsets from the start of the run).
	Requests []bench.Request
	Report   bench.ReportOptions // percentiles, metrics, SLOs; Duration is filled in
	// HostKVBytes is the host memory per rank for a host KV tier (the
	// policy parks KV there: seesaw's --swap-space); 0 means none.
	HostKVBytes int64
	// OverlapSteps models vLLM's pipeline-parallel virtual engines (the
	// baseline the Seesaw paper measures): pipeline stages carry work from
	// one step into the next, and Sched's sequence and token limits apply
	// per virtual engine, so a step may hold PP times as much. Off, each
	// step fills and drains the pipeline under the limits as given, as
	// Gearbox's executors do.
	OverlapSteps bool
	// MicroBatches is the pipeline micro-batches each step's tokens are
	// cut into (StepShape.MicroBatches); 0 means the plan's PP. 1 passes a
	// step through the stages whole, as Sarathi-Serve's pipeline carries
	// one chunk of a sequence at a time.
	MicroBatches int
	// Utilization is --gpu-memory-utilization; 0 means GPUMemoryUtilization.
	Utilization float64
	// Speculative models speculative decoding; the zero value is off.
	Speculative Speculation
}

// Speculation is speculative decoding in a simulated run: every decode
// step carries Tokens drafts a sequence (fewer where its output or the
// batch budget ends first), and each is kept with probability Acceptance
// given the ones before it were (so a step yields (1 − a^(k+1)) / (1 − a)
// tokens on average). The acceptance rate is the workload's, an input:
// n-gram drafts on code edits keep far more than on chat.
type Speculation struct {
	Tokens     int
	Acceptance float64
	// Draft is the draft model of the draft_model method; nil prices
	// n-gram drafts, which cost no model step. Each replica runs the
	// engine's draft model (its catch-up step and one step a draft after,
	// every drafting sequence batched) on a second cost runner on the
	// replica's first GPU and clock, so its steps take their time between
	// the target's; that GPU also holds its weights, activations and KV
	// pool, sized as serve sizes it (draftKV).
	Draft *model.Config
}

// validate checks the speculation's ranges.
func (s Speculation) validate() error {
	if s.Tokens == 0 {
		return nil
	}
	if s.Tokens < 0 || s.Tokens > specdecode.MaxTokens || !(s.Acceptance >= 0 && s.Acceptance < 1) {
		return fmt.Errorf("sim: speculative decoding needs 1 to %d draft tokens and an acceptance rate in [0, 1), got %d and %v", specdecode.MaxTokens, s.Tokens, s.Acceptance)
	}
	return nil
}

// anyDrafter drafts k copies of a sequence's last token: in a simulated
// run the runner, not the drafts' content, decides what is kept.
type anyDrafter struct{}

func (anyDrafter) Propose(dst, tokens []int, k int) []int {
	for range k {
		dst = append(dst, tokens[len(tokens)-1])
	}
	return dst
}

// PlanSpan is a stretch of consecutive steps one replica ran under one plan.
type PlanSpan struct {
	Replica int     `json:"replica"`
	Plan    string  `json:"plan"`
	Start   float64 `json:"start_s"`
	End     float64 `json:"end_s"`
	Steps   int     `json:"steps"`
}

// RunResult is what a run produced.
type RunResult struct {
	Report      *bench.Report
	Timeline    []PlanSpan
	Steps       int           // engine steps over all replicas
	SimDuration time.Duration // virtual time from the first arrival to the last token
	KVTokens    int64         // KV capacity of one replica, tokens
	Preemptions int64
	// Speculative decoding: drafts verified and kept, over replicas, and
	// the draft model's steps and their seconds (Speculation.Draft).
	DraftTokens, AcceptedTokens int64
	DraftSteps                  int
	DraftSeconds                float64
	// Placements is what the steps under each of the policy's placements
	// did, and Host what the host KV tier and the transitions cost,
	// summed over replicas (Seesaw's per-phase breakdown).
	Placements []PlacementStats
	Host       HostStats
	// TokensPerSecond[i] is the tokens (prompt and output) the deployment
	// computed in second i of the run, summed over replicas: the combined
	// throughput the Shift paper plots.
	TokensPerSecond []float64
}

// PeakThroughput is the largest TokensPerSecond entry.
func (r *RunResult) PeakThroughput() float64 {
	peak := 0.0
	for _, v := range r.TokensPerSecond {
		peak = max(peak, v)
	}
	return peak
}

// addTokens spreads a step's tokens over the seconds it spans.
func (r *RunResult) addTokens(start, end float64, tokens int) {
	if end <= start {
		return
	}
	rate := float64(tokens) / (end - start)
	for t := start; t < end; {
		sec := int(t)
		for len(r.TokensPerSecond) <= sec {
			r.TokensPerSecond = append(r.TokensPerSecond, 0)
		}
		stop := min(end, float64(sec+1))
		r.TokensPerSecond[sec] += rate * (stop - t)
		t = stop
	}
}

// epoch is the virtual time a run starts at; arrivals are offsets from it.
var epoch = time.Unix(0, 0)

// quiet discards the engines' logs.
var quiet = slog.New(slog.DiscardHandler)

// replica is one independent engine of the deployment: an engine.Engine
// over its own cost runner and virtual clock.
type replica struct {
	id     int
	eng    *engine.Engine
	runner *CostRunner
	draft  *CostRunner // the draft model's (Speculation.Draft), or nil
	clk    *clock.Fake
	free   time.Duration // virtual time its next step may start
	active bool          // has requests
	span   *PlanSpan
	load   int                       // outstanding tokens (prompt + generated) of its unfinished requests, for dispatch
	live   map[*engine.Stream]*track // requests submitted to its engine and not ended, by stream
	ready  []*engine.Stream          // streams the engine queued events on since the last collect
}

// track is one request's progress.
type track struct {
	req     bench.Request
	rep     *replica
	arrival time.Duration
	first   time.Duration
	last    time.Duration
	tokens  int
	itl     []time.Duration
	failed  string
}

// Run simulates serving opts.Requests: each replica is the real serving
// loop (engine.Engine, with its scheduler and opts.Policy) over a
// CostRunner, which advances a virtual clock by the cost model's duration
// of every step. Run is a discrete-event driver: it submits each request
// when the virtual clock reaches its arrival, steps the replica whose next
// step starts first (Engine.Iterate), reads the tokens the step produced
// from the request streams, and jumps an idle replica's clock to its next
// arrival. Data-parallel replicas are independent engines, each with its
// own clock and KV pool, fed by a least-outstanding-tokens dispatcher, as
// vLLM data-parallel deployments are (see the package documentation).
func Run(opts RunOptions) (*RunResult, error) {
	if opts.Model == nil || opts.Cost == nil {
		return nil, errors.New("sim: a model and a cost model are required")
	}
	if err := opts.Speculative.validate(); err != nil {
		return nil, err
	}
	if opts.BlockSize == 0 {
		opts.BlockSize = 16
	}
	base := opts.Plan
	base.DP = 1
	placements := policy.NewStatic(base).Placements()
	if opts.Policy != nil {
		placements = opts.Policy.Placements()
	}
	kv, err := kvCapacity(opts, base, placements)
	if err != nil {
		return nil, err
	}
	draftBlocks := 0
	if opts.Speculative.Draft != nil && opts.Speculative.Tokens > 0 {
		if kv, draftBlocks, err = draftKV(opts, base, placements, kv); err != nil {
			return nil, err
		}
	}
	hostBlocks := 0
	if opts.HostKVBytes > 0 {
		perBlock := int64(opts.BlockSize) * int64(opts.Model.KVBytesPerToken(int(opts.Cost.kvBytes)))
		hostBlocks = int(opts.HostKVBytes * int64(base.Ranks()) / perBlock)
	}
	blocks := int(kv[0] / int64(opts.BlockSize))
	if blocks < 1 {
		return nil, fmt.Errorf("sim: %s leaves no memory for the KV cache", base)
	}
	if pp := placements[0].Plan.PP; opts.OverlapSteps && pp > 1 {
		// vLLM runs PP stages as PP virtual engines, each scheduling its
		// own batches under the engine's limits: one step here carries a
		// micro-batch of each, so the limits are per micro-batch (of the
		// placement the engine starts under: Seesaw's prefill one).
		opts.Sched.MaxNumSeqs = cmp.Or(opts.Sched.MaxNumSeqs, sched.DefaultMaxNumSeqs) * pp
		opts.Sched.MaxNumBatchedTokens = cmp.Or(opts.Sched.MaxNumBatchedTokens, sched.DefaultMaxNumBatchedTokens) * pp
	}
	reps := make([]*replica, max(opts.Plan.DP, 1))
	for i := range reps {
		r := &replica{id: i, clk: clock.NewFake(epoch), live: map[*engine.Stream]*track{}}
		if r.runner, err = NewCostRunner(opts.Cost, opts.Model, placements, opts.BlockSize, blocks, r.clk); err != nil {
			return nil, err
		}
		if hostBlocks > 0 {
			r.runner.EnableHostTier(hostBlocks)
		}
		r.runner.OverlapSteps(opts.OverlapSteps)
		r.runner.shape.MicroBatches = opts.MicroBatches
		eo := engine.Options{
			Exec: r.runner, Policy: opts.Policy, Clock: r.clk, Sched: opts.Sched, Logger: quiet,
			OnEvent: func(s *engine.Stream) { r.ready = append(r.ready, s) },
		}
		switch sp := opts.Speculative; {
		case sp.Tokens > 0 && sp.Draft != nil:
			single := []parallel.Placement{parallel.Standard(parallel.Single)}
			if r.draft, err = NewCostRunner(opts.Cost, sp.Draft, single, opts.BlockSize, draftBlocks, r.clk); err != nil {
				return nil, fmt.Errorf("sim: draft model: %w", err)
			}
			eo.Speculative, eo.DraftRunner = specdecode.Config{Method: specdecode.DraftModel, NumTokens: sp.Tokens, Model: "draft"}, r.draft
		case sp.Tokens > 0:
			eo.Speculative, eo.Drafter = specdecode.Config{Method: specdecode.NGramMethod, NumTokens: sp.Tokens}, anyDrafter{}
		}
		if sp := opts.Speculative; sp.Tokens > 0 {
			r.runner.Accept(sp.Acceptance, uint64(i))
		}
		// No tokenizer and no EOS: the engine produces no text and
		// generates each request's output tokens in full.
		r.eng, err = engine.NewEngine(eo)
		if err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		reps[i] = r
	}

	tracks := make([]*track, len(opts.Requests))
	order := make([]int, len(opts.Requests))
	for i, r := range opts.Requests {
		tracks[i] = &track{req: r, arrival: r.Arrival}
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(tracks[a].arrival, tracks[b].arrival) })

	res := &RunResult{KVTokens: kv[0]}
	ctx := context.Background()
	var q replicaQueue
	next := 0 // next arrival in order
	loads := make([]sched.Load, len(reps))
	var dispatch sched.LeastLoaded
	for {
		// The next event: an arrival, or the earliest busy replica's step.
		var rep *replica
		if q.Len() > 0 {
			rep = q[0]
		}
		if next < len(order) && (rep == nil || tracks[order[next]].arrival <= rep.free) {
			t := tracks[order[next]]
			next++
			// The engines only count admitted requests, so dispatch by
			// every request routed to a replica and not done.
			for i, r := range reps {
				loads[i] = sched.Load{QueuedPrefill: r.load}
			}
			target := reps[dispatch.Pick(loads)]
			if err := target.submit(t, opts.Model.Vocab); err != nil {
				t.failed = failure(err)
				continue
			}
			if !target.active {
				target.active, target.free = true, max(target.free, t.arrival)
				heap.Push(&q, target)
			}
			continue
		}
		if rep == nil {
			break // no arrivals left and every replica idle
		}
		rep.clk.Set(epoch.Add(rep.free))
		steps := rep.runner.steps
		ran, err := rep.eng.Iterate(ctx)
		if err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		end := rep.clk.Now().Sub(epoch)
		rep.collect(rep.free, end)
		if !ran {
			heap.Pop(&q)
			rep.active = false
			continue
		}
		if rep.runner.steps == steps { // a transition or a swap, and no step
			rep.free = end
			heap.Fix(&q, 0)
			continue
		}
		st := rep.runner.Last()
		start := st.Start.Sub(epoch) // after a transition or a wait for swapped KV, if any
		res.Steps++
		res.addTokens(start.Seconds(), end.Seconds(), st.Tokens)
		rep.note(st.Plan, start.Seconds(), end.Seconds(), &res.Timeline)
		rep.free = end
		heap.Fix(&q, 0)
	}
	for _, r := range reps {
		st := r.eng.Stats()
		res.Preemptions += st.Preemptions
		res.DraftTokens += st.DraftTokens
		res.AcceptedTokens += st.AcceptedTokens
		if r.draft != nil {
			ds := r.draft.PlacementStats()[0]
			res.DraftSteps += ds.Steps
			res.DraftSeconds += ds.Seconds
		}
		res.Placements = addPlacementStats(res.Placements, r.runner.PlacementStats())
		res.Host.add(r.runner.HostStats())
		if r.span != nil {
			res.Timeline = append(res.Timeline, *r.span)
		}
	}
	res.Report, res.SimDuration = report(tracks, opts.Report)
	return res, nil
}

// kvCapacity is the KV tokens of each replica: with placements that share
// one KV cache (Shift's), what the base leaves beside every placement's
// weights; with placements between which the KV moves (Seesaw's), one
// placement's weights are resident at a time, so the least any of them
// leaves.
func kvCapacity(opts RunOptions, base parallel.Plan, placements []parallel.Placement) ([]int64, error) {
	mem := MemoryOptions{Also: placements, MaxBatchedTokens: opts.Sched.MaxNumBatchedTokens, MaxSeqs: opts.Sched.MaxNumSeqs, Utilization: opts.Utilization}
	shared := true
	for _, p := range placements[1:] {
		shared = shared && p.SharesKV(opts.Model, placements[0])
	}
	if shared {
		return opts.Cost.KVCapacity(opts.Model, base, mem)
	}
	mem.Also = nil
	var out []int64
	for _, p := range placements {
		kv, err := opts.Cost.KVCapacity(opts.Model, p.Plan, mem)
		if err != nil {
			return nil, err
		}
		if out == nil || kv[0] < out[0] {
			out = kv
		}
	}
	return out, nil
}

// DraftKVBudget bounds the draft model's KV pool in bytes, as gearbox
// serve sizes it (the CPU's default pool: --max-num-seqs full contexts,
// at most 4 GiB; cmd/gearbox's cpuKVBlocks).
const DraftKVBudget = 4 << 30

// draftKV sizes the draft model's KV pool in blocks (DraftKVBudget) and
// returns kv, each replica's KV capacity in tokens, less what the draft
// model takes from the replica's first GPU: its weights, activations and
// that pool.
func draftKV(opts RunOptions, base parallel.Plan, placements []parallel.Placement, kv []int64) ([]int64, int, error) {
	mem := MemoryOptions{Also: placements, MaxBatchedTokens: opts.Sched.MaxNumBatchedTokens, MaxSeqs: opts.Sched.MaxNumSeqs, Utilization: opts.Utilization}
	t, err := opts.Cost.Memory(opts.Model, base, 0, mem)
	if err != nil {
		return nil, 0, err
	}
	mem.Also = nil
	draft := opts.Speculative.Draft
	d, err := opts.Cost.Memory(draft, parallel.Single, 0, mem)
	if err != nil {
		return nil, 0, fmt.Errorf("sim: draft model: %w", err)
	}
	maxLen := min(draft.MaxPositions, cmp.Or(opts.Sched.MaxModelLen, opts.Model.MaxPositions))
	seqs := cmp.Or(opts.Sched.MaxNumSeqs, sched.DefaultMaxNumSeqs)
	bs := int64(opts.BlockSize)
	perSeq := (int64(maxLen) + bs - 1) / bs
	blocks := max(perSeq, min(int64(seqs)*perSeq, DraftKVBudget/max(1, d.KVBytesPerToken*bs)))
	left := t.KV - d.Weights - d.Activations - blocks*bs*d.KVBytesPerToken
	if left <= 0 || t.KVBytesPerToken == 0 {
		return nil, 0, fmt.Errorf("sim: the draft model's weights and KV pool leave no memory for the target's KV cache on the first GPU")
	}
	out := slices.Clone(kv)
	for i := range out {
		out[i] = min(out[i], left/t.KVBytesPerToken)
	}
	return out, int(blocks), nil
}

// submit hands t to the replica's engine at t's arrival: the clock reads
// the arrival while the engine stamps it (it is set to the replica's next
// step before that step runs). A request whose prompt and output exceed the
// context length is refused as the server refuses it, before the engine.
func (r *replica) submit(t *track, vocab int) error {
	if t.req.InputTokens > 0 && t.req.OutputTokens > 0 && t.req.InputTokens+t.req.OutputTokens > r.eng.MaxModelLen() {
		return fmt.Errorf("%w: %d prompt + %d output tokens exceed the context length %d", engine.ErrPromptTooLong,
			t.req.InputTokens, t.req.OutputTokens, r.eng.MaxModelLen())
	}
	r.clk.Set(epoch.Add(t.arrival))
	out, err := r.eng.Submit(engine.Request{
		ID: strconv.Itoa(t.req.Index), Prompt: promptTokens(t.req, vocab), MaxTokens: t.req.OutputTokens, IgnoreEOS: true,
		Sampling: sample.Params{Logprobs: -1},
	})
	if err != nil {
		return err
	}
	t.rep = r
	r.load += t.req.InputTokens
	r.live[out] = t
	return nil
}

// collect reads the events of the step that ran from start to now (or of
// the iteration at start that ran nothing) from the streams the engine
// queued them on: each token is stamped now; a request the scheduler ended
// before its output tokens (its tokens no longer fit the KV pool) failed
// at start.
func (r *replica) collect(start, now time.Duration) {
	for i, out := range r.ready {
		r.ready[i] = nil
		t := r.live[out]
		if t == nil {
			continue // ended, its events read
		}
		for {
			ev, ok := out.TryRecv()
			if !ok {
				break
			}
			for range ev.Tokens {
				t.token(now)
			}
			if ev.Finish != "" {
				t.end(ev, start, now)
				delete(r.live, out)
			}
		}
	}
	r.ready = r.ready[:0]
}

// token records one output token at now.
func (t *track) token(now time.Duration) {
	t.tokens++
	t.rep.load++
	if t.tokens == 1 {
		t.first = now
	} else {
		t.itl = append(t.itl, now-t.last)
	}
	t.last = now
}

// end records the request's final event.
func (t *track) end(ev engine.Event, start, now time.Duration) {
	t.rep.load -= t.req.InputTokens + t.tokens
	switch {
	case ev.Finish == engine.FinishLength && t.tokens >= t.req.OutputTokens:
	case ev.Finish == engine.FinishLength:
		t.failed = "kv capacity"
		if len(ev.Tokens) == 0 {
			t.last = start // the scheduler ended it before the step
		} else {
			t.last = now
		}
	default:
		t.failed = ev.Finish
	}
}

func failure(err error) string {
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		return "queue full"
	case errors.Is(err, engine.ErrPromptTooLong):
		return "too long"
	}
	return "rejected"
}

// note extends the replica's current plan span or starts a new one.
func (r *replica) note(plan string, start, end float64, timeline *[]PlanSpan) {
	if r.span != nil && r.span.Plan == plan && r.span.End >= start-1e-9 {
		r.span.End = end
		r.span.Steps++
		return
	}
	if r.span != nil {
		*timeline = append(*timeline, *r.span)
	}
	r.span = &PlanSpan{Replica: r.id, Plan: plan, Start: start, End: end, Steps: 1}
}

// promptTokens gives a request's prompt token ids: Mooncake's shared
// prefix blocks become identical 512-token runs (so the prefix cache hits
// as it would in the real system); everything else is distinct per
// request.
func promptTokens(r bench.Request, vocab int) []int {
	out := make([]int, r.InputTokens)
	for i := range out {
		key := uint64(r.Index)<<32 | uint64(i)
		if b := i / bench.MooncakeBlockTokens; b < len(r.HashIDs) {
			key = uint64(r.HashIDs[b])<<32 | uint64(i%bench.MooncakeBlockTokens) | 1<<63
		}
		key ^= key >> 33
		key *= 0xff51afd7ed558ccd
		key ^= key >> 33
		out[i] = int(key % uint64(vocab))
	}
	return out
}

func report(tracks []*track, opts bench.ReportOptions) (*bench.Report, time.Duration) {
	results := make([]bench.RequestResult, len(tracks))
	var first, last time.Duration
	for i, t := range tracks {
		if i == 0 || t.arrival < first {
			first = t.arrival
		}
		last = max(last, t.last)
		r := bench.RequestResult{Index: t.req.Index, RequestedInputTokens: t.req.InputTokens, InputTokens: t.req.InputTokens,
			OutputTokens: t.tokens, Start: t.arrival, ITL: t.itl}
		if t.failed != "" || t.tokens < t.req.OutputTokens {
			r.Failure = t.failed
			if r.Failure == "" {
				r.Failure = "unfinished"
			}
			r.Error = r.Failure
		} else {
			r.TTFT, r.Latency = t.first-t.arrival, t.last-t.arrival
		}
		results[i] = r
	}
	opts.Duration = last - first
	return bench.ComputeReport(results, opts), opts.Duration
}

// replicaQueue orders busy replicas by the time their next step starts,
// ties by replica id, so runs are deterministic.
type replicaQueue []*replica

func (q replicaQueue) Len() int { return len(q) }
func (q replicaQueue) Less(i, j int) bool {
	if q[i].free != q[j].free {
		return q[i].free < q[j].free
	}
	return q[i].id < q[j].id
}
func (q replicaQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *replicaQueue) Push(x any)   { *q = append(*q, x.(*replica)) }
func (q *replicaQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
