package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sched"
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

// replica is one independent engine of the deployment.
type replica struct {
	id     int
	sched  *sched.Scheduler
	free   float64                // virtual time its next step may start
	active bool                   // has requests
	layout map[string]*LayoutCost // by placement name
	span   *PlanSpan
	load   int // outstanding tokens (prompt + generated) of its unfinished requests, for dispatch
}

// track is one request's progress.
type track struct {
	req     bench.Request
	rep     *replica
	arrival float64
	first   float64
	last    float64
	tokens  int
	itl     []time.Duration
	done    bool
	failed  string
}

// Run simulates serving opts.Requests: the real scheduler (sched) and
// policy decide every step, the cost model says how long it takes, and a
// virtual clock jumps from event to event. Data-parallel replicas are
// independent engines fed by a least-outstanding-tokens dispatcher, as
// vLLM data-parallel deployments are.
func Run(opts RunOptions) (*RunResult, error) {
	if opts.Model == nil || opts.Cost == nil {
		return nil, errors.New("sim: a model and a cost model are required")
	}
	if opts.BlockSize == 0 {
		opts.BlockSize = 16
	}
	engine := opts.Plan
	engine.DP = 1
	pol := opts.Policy
	if pol == nil {
		pol = policy.NewStatic(engine)
	}
	placements := pol.Placements()
	mem := MemoryOptions{Also: placements, MaxBatchedTokens: opts.Sched.MaxNumBatchedTokens, MaxSeqs: opts.Sched.MaxNumSeqs}
	kv, err := opts.Cost.KVCapacity(opts.Model, engine, mem)
	if err != nil {
		return nil, err
	}
	blocks := int(kv[0] / int64(opts.BlockSize))
	if blocks < 1 {
		return nil, fmt.Errorf("sim: %s leaves no memory for the KV cache", engine)
	}
	layouts := map[string]*LayoutCost{}
	for _, p := range placements {
		if layouts[p.Name], err = opts.Cost.Layout(opts.Model, p); err != nil {
			return nil, err
		}
	}
	sc := opts.Sched
	sc.BlockSize, sc.NumBlocks, sc.Replicas = opts.BlockSize, blocks, 1
	if sc.MaxModelLen == 0 {
		sc.MaxModelLen = opts.Model.MaxPositions
	}
	reps := make([]*replica, opts.Plan.DP)
	for i := range reps {
		s, err := sched.New(sc)
		if err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		reps[i] = &replica{id: i, sched: s, layout: layouts}
	}

	tracks := make([]*track, len(opts.Requests))
	byID := map[string]*track{}
	order := make([]int, len(opts.Requests))
	for i, r := range opts.Requests {
		tracks[i] = &track{req: r, arrival: r.Arrival.Seconds()}
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpFloat(tracks[a].arrival, tracks[b].arrival) })

	res := &RunResult{KVTokens: kv[0]}
	var q replicaQueue
	next := 0 // next arrival in order
	var shape StepShape
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
			// The replicas' schedulers only count admitted requests, so
			// dispatch by every request routed to a replica and not done.
			for i, r := range reps {
				loads[i] = sched.Load{QueuedPrefill: r.load}
			}
			target := reps[dispatch.Pick(loads)]
			id := fmt.Sprint(t.req.Index)
			byID[id] = t
			err := target.sched.Add(&sched.Request{ID: id, Prompt: promptTokens(t.req, opts.Model.Vocab), MaxTokens: t.req.OutputTokens,
				Arrival: time.Unix(0, 0).Add(t.req.Arrival)})
			if err != nil {
				t.failed, t.done = failure(err), true
				continue
			}
			t.rep = target
			target.load += t.req.InputTokens
			if !target.active {
				target.active, target.free = true, max(target.free, t.arrival)
				heap.Push(&q, target)
			}
			continue
		}
		if rep == nil {
			break // no arrivals left and every replica idle
		}
		step := rep.sched.Schedule()
		finishDrained(rep, byID, rep.free)
		if len(step.Seqs) == 0 {
			heap.Pop(&q)
			rep.active = false
			continue
		}
		shape.Seqs = shape.Seqs[:0]
		for _, s := range step.Seqs {
			seq := Seq{Context: s.Pos, New: len(s.Tokens)}
			if s.Sample {
				seq.Logits = 1
			}
			shape.Seqs = append(shape.Seqs, seq)
		}
		plan := pol.Place(pol.Decide(policy.State{}), policy.Batch{Tokens: step.NumBatchedTokens, Seqs: len(step.Seqs)})
		lc, ok := rep.layout[plan.Name]
		if !ok {
			return nil, fmt.Errorf("sim: policy %s chose %s, which the deployment does not hold", pol, plan)
		}
		start := rep.free
		end := start + lc.Step(&shape).Seconds
		res.Steps++
		res.addTokens(start, end, step.NumBatchedTokens)
		rep.note(plan.Name, start, end, &res.Timeline)
		sampled := make([]int, len(step.Seqs))
		for i, s := range step.Seqs {
			sampled[i] = -1
			if s.Sample {
				sampled[i] = 1 + i%7 // the token's value does not change the cost
			}
		}
		if err := rep.sched.Update(step, sampled); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		for i, s := range step.Seqs {
			if sampled[i] < 0 {
				continue
			}
			t := byID[s.ID]
			if t == nil || t.done {
				continue
			}
			t.tokens++
			rep.load++
			if t.tokens == 1 {
				t.first = end
			} else {
				t.itl = append(t.itl, seconds(end-t.last))
			}
			t.last = end
			if t.tokens >= t.req.OutputTokens {
				t.finish()
				_ = rep.sched.Finish(s.ID, sched.Length)
			}
		}
		finishDrained(rep, byID, end)
		rep.free = end
		heap.Fix(&q, 0)
	}
	for _, r := range reps {
		res.Preemptions += r.sched.Preemptions()
		if r.span != nil {
			res.Timeline = append(res.Timeline, *r.span)
		}
	}
	res.Report, res.SimDuration = report(tracks, opts.Report)
	return res, nil
}

// finishDrained marks requests the scheduler ended on its own (too long
// for the KV pool) as failed.
func finishDrained(rep *replica, byID map[string]*track, now float64) {
	for _, f := range rep.sched.Drain() {
		if t := byID[f.ID]; t != nil && !t.done {
			t.finish()
			t.failed, t.last = "kv capacity", now
		}
	}
}

// finish marks the request done and takes its tokens off its replica's load.
func (t *track) finish() {
	t.done = true
	t.rep.load -= t.req.InputTokens + t.tokens
}

func failure(err error) string {
	switch {
	case errors.Is(err, sched.ErrQueueFull):
		return "queue full"
	case errors.Is(err, sched.ErrTooLong):
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
	first, last := math.Inf(1), 0.0
	for i, t := range tracks {
		first = min(first, t.arrival)
		last = max(last, t.last)
		r := bench.RequestResult{Index: t.req.Index, RequestedInputTokens: t.req.InputTokens, InputTokens: t.req.InputTokens,
			OutputTokens: t.tokens, Start: seconds(t.arrival), ITL: t.itl}
		if t.failed != "" || t.tokens < t.req.OutputTokens {
			r.Failure = t.failed
			if r.Failure == "" {
				r.Failure = "unfinished"
			}
			r.Error = r.Failure
		} else {
			r.TTFT, r.Latency = seconds(t.first-t.arrival), seconds(t.last-t.arrival)
		}
		results[i] = r
	}
	if len(tracks) == 0 {
		first = 0
	}
	opts.Duration = seconds(last - first)
	return bench.ComputeReport(results, opts), opts.Duration
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
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
