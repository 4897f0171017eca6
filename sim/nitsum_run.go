package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/slo"
)

// NitsumSystem is a way of serving a tiered workload on a GPU pool: Nitsum
// itself and the baselines of the paper's ablation (Figure 14, §4.2.1).
type NitsumSystem uint8

const (
	// SystemNitsum is Nitsum: each control window the planner
	// (nitsum.Planner) re-plans the pool from the last window's rates
	// (nitsum.Meter), the global scheduler (nitsum.Dispatcher) places each
	// request and each instance's local scheduler (nitsum.Local) forms
	// its batches; a changed instance pauses for its reconfiguration
	// (NitsumRunOptions.Switch).
	SystemNitsum NitsumSystem = iota
	// SystemStaticPlan is Nitsum's scheduler without dynamic TP: the
	// planner runs once, on the whole trace's mean rates, and the plan
	// stays ("+ Nitsum scheduler" in the ablation).
	SystemStaticPlan
	// SystemVanilla is vanilla SGLang: TP-degree instances that each
	// prefill and decode (no P/D split), requests round-robin, prefill
	// first (SGLang's default), no SLO awareness.
	SystemVanilla
	// SystemPD is SGLang with static P/D disaggregation: half the
	// instances prefill, half decode (the paper's P:D is not stated),
	// requests round-robin, first come first served, no SLO awareness.
	SystemPD
	// SystemSLOBatch is static P/D at one TP degree (the best for the
	// trace) with the SLO-aware batch rule: batches capped at the
	// profiled B^P and B^D of the strictest tier, and a request predicted
	// to miss its TTFT (its instance's SLO bandwidth is used up) deferred
	// behind the others (the Dispatcher over one tier of the strictest
	// targets).
	SystemSLOBatch
	// SystemSplit is one group per tier, each at the tier's best static
	// TP degree, with rejection: a request its group cannot take within
	// the targets is rejected (Split in §4).
	SystemSplit
	// SystemTierSplit is SystemSplit's groups with SystemSLOBatch's rule
	// instead of rejection: a request its group cannot take within the
	// targets is deferred behind the group's feasible ones (best effort
	// on a prefill instance of its own group). It is the ablation's
	// fourth step (§4.2.1), which partitions the cluster by tier on top
	// of the batch rule that "defers those that cannot" meet their SLO;
	// the rejecting SystemSplit is §4's Split baseline.
	SystemTierSplit
)

var systemNames = [...]string{"nitsum", "nitsum-static", "vanilla", "pd", "slo-batch", "split", "tier-split"}

func (s NitsumSystem) String() string {
	if int(s) < len(systemNames) {
		return systemNames[s]
	}
	return fmt.Sprintf("NitsumSystem(%d)", uint8(s))
}

// SGLangChunkTokens is the prefill token budget of one SGLang iteration
// (--chunked-prefill-size, default 8,192 on 80 GB GPUs in SGLang's
// server_args), used by the baselines without profiled batch caps.
const SGLangChunkTokens = 8192

// SGLangMaxRunning is the baselines' cap on running requests per
// instance (SGLang sizes --max-running-requests from memory; 256 is
// vLLM's default --max-num-seqs and the Shift paper's, used here for
// every uncapped baseline).
const SGLangMaxRunning = 256

// NitsumDrain is the seconds a run goes on after the last arrival so that
// admitted requests can finish; what is unfinished then counts as missing
// its targets.
const NitsumDrain = 30.0

// NitsumRequest is one request of a tiered workload.
type NitsumRequest struct {
	Arrival       float64 // seconds from the start
	Input, Output int     // prompt and output tokens, ≥ 1
	Tier          int     // index in the tier set
}

// NitsumOutcome is one request's simulated life, seconds from the start;
// First and Last are 0 for a request that never got that far.
type NitsumOutcome struct {
	First, Last float64 // first and last token
	Rejected    bool    // turned away (Split's rejection)
	Finished    bool
	Good        bool // finished within both of its tier's targets
}

// TTFT and TPOT of a finished request (TPOT the mean over its tokens after
// the first; 0 for a one-token output).
func (o NitsumOutcome) latencies(r NitsumRequest) (ttft, tpot float64) {
	ttft = o.First - r.Arrival
	if r.Output > 1 {
		tpot = (o.Last - o.First) / float64(r.Output-1)
	}
	return ttft, tpot
}

// NitsumRunOptions describe a simulated pool and its traffic.
type NitsumRunOptions struct {
	Model *model.Config
	// Cost is bound to one server node; the pool is Servers of them,
	// joined by NIC.
	Cost    *CostModel
	Servers int // 0 means 1
	// NIC joins the servers; the zero value means the p4d.24xlarge's
	// 4×100 Gbps EFA (the paper does not give its inter-node fabric).
	NIC      NIC
	Tiers    *slo.Set
	Profile  nitsum.Profile // from NitsumProfiler.Profile, possibly Restrict-ed
	Requests []NitsumRequest
	System   NitsumSystem
	Switch   NitsumSwitch  // SystemNitsum's reconfiguration path
	Window   time.Duration // SystemNitsum's control window; 0 means nitsum.DefaultWindow
	// ProfileWindow is the span of past arrivals the planner's rates are
	// averaged over (§4.2.4's "profile window", a separate knob): the
	// mean of the Meter's last ⌈ProfileWindow/Window⌉ window rates. 0
	// means one window, the rates of §3.3.1.
	ProfileWindow time.Duration
	// NoFill plans with nitsum.Planner.Plan, which leaves the GPUs no
	// tier's measured rate needs idle (spare); by default the run plans
	// with PlanFilled, which gives them to the tiers as headroom (the
	// paper leaves idle GPUs unspecified, P10).
	NoFill bool
	// Plain runs the planner's plain greedy, without the unmet-demand
	// weight (nitsum.Options.Plain): an ablation.
	Plain bool
	// OldestBestEffort serves Nitsum's best-effort requests first come,
	// first served; by default SystemNitsum and SystemStaticPlan serve
	// them newest first (nitsum.Local.BestEffortNewestFirst, the
	// scheduler's goodput-aware batch composition) and the baselines
	// that defer (SystemSLOBatch, SystemTierSplit) first come, first
	// served. An ablation.
	OldestBestEffort bool
	// SplitTP is the degree of each tier's group under SystemSplit and
	// SystemTierSplit, one per tier (0: BestTP, the profile's best); nil
	// means BestTP for every tier. The paper's Split runs each tier at
	// "the TP level that results in the highest goodput for the entire
	// trace" (§4, footnote), which a caller finds by trying degrees.
	SplitTP []int
	// TP is the static degree of SystemVanilla, SystemPD and
	// SystemSLOBatch; 0 means 1.
	TP int
}

// NitsumResult is a run.
type NitsumResult struct {
	Outcomes []NitsumOutcome // by request index
	// Span is the first to the last arrival, seconds; when the arrivals
	// span less than one control window (a batch submitted at once), the
	// first arrival to the last token instead.
	Span       float64
	Good       int
	Goodput    float64 // good requests per second of Span
	Attainment float64 // good over all requests
	Plans      int     // plans computed (SystemNitsum, SystemStaticPlan)
	Reconfigs  int     // windows whose plan changed the instances
	// PausedGPUSeconds is the GPU time lost to reconfiguration pauses.
	PausedGPUSeconds float64
	Instances        []nitsum.Instance // the last plan's (or the static) instances
}

// Percentile returns tier s's TTFT and TPOT at quantile q (0…1) over its
// finished requests, seconds; NaN with none.
func (r *NitsumResult) Percentile(reqs []NitsumRequest, s int, q float64) (ttft, tpot float64) {
	var a, b []float64
	for i, o := range r.Outcomes {
		if reqs[i].Tier != s || !o.Finished {
			continue
		}
		x, y := o.latencies(reqs[i])
		a, b = append(a, x), append(b, y)
	}
	return quantile(a, q), quantile(b, q)
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	return v[min(len(v)-1, int(q*float64(len(v))))]
}

// instance is one TP group at run time.
type instance struct {
	spec      nitsum.Instance
	colocated bool
	lc        *LayoutCost
	local     *nitsum.Local
	cap       int   // batch cap (requests)
	running   []int // decode: requests holding KV here
	migrated  []int // decode: requests whose KV arrives with the reconfiguration, admitted first
	inFlight  []int // the iteration in progress
	prefill   bool  // the iteration in progress is a prefill
	busy      bool
	until     float64 // end of the iteration in progress
	ready     float64 // not before: the reconfiguration pause
	kvCap     int64   // KV tokens the instance holds
	kvUsed    int64
	retired   bool
	gen       int // the dispatcher generation that placed its queued work
}

func (in *instance) load() int {
	return len(in.running) + len(in.migrated) + in.local.Len(nitsum.Feasible) + in.local.Len(nitsum.BestEffort)
}

type reqState struct {
	gen       int          // dispatcher generation of its prefill placement
	class     nitsum.Class // the label of its latest placement
	generated int          // tokens out
	inst      *instance
	kv        int64
}

type nitsumEvent struct {
	t    float64
	seq  int
	kind uint8
	req  int
	in   *instance
}

const (
	evArrive  uint8 = iota
	evDone          // an instance's iteration ends
	evHandoff       // a request's KV reaches its decode instance
	evTick          // a control window ends
	evReady         // a paused instance may start
)

type eventHeap []nitsumEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(nitsumEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// nitsumRun is one run's state.
type nitsumRun struct {
	o        NitsumRunOptions
	cluster  Cluster
	prof     *NitsumProfiler
	tpIndex  map[int]int
	kvTok    int64 // KV bytes per token (whole model)
	freeGPU  int64 // bytes per GPU free for KV with full weights (Nitsum's W1)
	freeTP   []int64
	reqs     []NitsumRequest
	st       []reqState
	out      []NitsumOutcome
	insts    []*instance
	disp     *nitsum.Dispatcher
	dispSet  *slo.Set
	gen      int
	rr       int
	pending  []int // requests with no instance to take them
	events   eventHeap
	seq      int
	now      float64
	clk      *clock.Fake
	epoch    time.Time
	meter    *nitsum.Meter
	planner  *nitsum.Planner
	history  [][]float64 // the Meter's window rates within the profile window, oldest first
	res      *NitsumResult
	shape    StepShape
	untiered bool
	reject   bool
}

// RunNitsum simulates opts.System serving opts.Requests on the pool and
// returns every request's outcome and the goodput.
func RunNitsum(opts NitsumRunOptions) (*NitsumResult, error) {
	if opts.Model == nil || opts.Cost == nil || opts.Tiers == nil {
		return nil, errors.New("sim: nitsum run: model, cost model and tiers are required")
	}
	if len(opts.Requests) == 0 {
		return nil, errors.New("sim: nitsum run: no requests")
	}
	if opts.Servers == 0 {
		opts.Servers = 1
	}
	if opts.Window == 0 {
		opts.Window = nitsum.DefaultWindow
	}
	if opts.TP == 0 {
		opts.TP = 1
	}
	if opts.NIC == (NIC{}) {
		opts.NIC = p4dNIC
	}
	for i, r := range opts.Requests {
		if r.Input < 1 || r.Output < 1 || r.Tier < 0 || r.Tier >= opts.Tiers.Len() || opts.Tiers.At(r.Tier).Background {
			return nil, fmt.Errorf("sim: nitsum run: request %d: bad lengths or tier (%+v)", i, r)
		}
		if i > 0 && r.Arrival < opts.Requests[i-1].Arrival {
			return nil, fmt.Errorf("sim: nitsum run: request %d arrives before request %d", i, i-1)
		}
	}
	node := opts.Cost.Node
	r := &nitsumRun{
		o:       opts,
		cluster: Cluster{Node: node, Servers: opts.Servers, ServersPerRack: opts.Servers, NIC: opts.NIC},
		tpIndex: map[int]int{},
		reqs:    opts.Requests,
		st:      make([]reqState, len(opts.Requests)),
		out:     make([]NitsumOutcome, len(opts.Requests)),
		res:     &NitsumResult{},
		epoch:   time.Unix(0, 0),
	}
	prof, err := NewNitsumProfiler(opts.Cost, opts.Model, opts.Profile.TP)
	if err != nil {
		return nil, err
	}
	r.prof = prof
	for i, t := range opts.Profile.TP {
		r.tpIndex[t] = i
	}
	if err := r.memory(); err != nil {
		return nil, err
	}
	if err := r.setup(); err != nil {
		return nil, err
	}
	for i, q := range r.reqs {
		r.push(nitsumEvent{t: q.Arrival, kind: evArrive, req: i})
	}
	end := r.reqs[len(r.reqs)-1].Arrival + NitsumDrain
	for r.events.Len() > 0 {
		e := heap.Pop(&r.events).(nitsumEvent)
		if e.t > end {
			break
		}
		r.now = e.t
		r.clk.Set(r.epoch.Add(time.Duration(e.t * float64(time.Second))))
		if err := r.handle(e); err != nil {
			return nil, err
		}
	}
	return r.finish(), nil
}

// memory sizes the KV each GPU holds. Nitsum keeps a full weight copy on
// every GPU (W1); the baselines shard their weights. A model whose full
// copy does not fit is refused for Nitsum (spec §4.6: 70B on 80 GB).
func (r *nitsumRun) memory() error {
	cfg, cm := r.o.Model, r.o.Cost
	r.kvTok = int64(cfg.KVBytesPerToken(int(cm.kvBytes)))
	usable := int64(GPUMemoryUtilization*float64(cm.Node.GPU.MemoryBytes)) - CSPSActivationReserve
	weights := cfg.NumParams() * cm.wgtBytes
	r.freeGPU = usable - weights
	full := r.o.System == SystemNitsum || r.o.System == SystemStaticPlan
	if full && r.freeGPU <= 0 {
		return fmt.Errorf("sim: nitsum run: the model's full weights (%.1f GB) do not fit one %s (%.1f GB usable): Nitsum keeps a full copy per GPU",
			float64(weights)/1e9, cm.Node.GPU.Name, float64(usable)/1e9)
	}
	r.freeTP = make([]int64, len(r.o.Profile.TP))
	for i, t := range r.o.Profile.TP {
		free := r.freeGPU
		if !full {
			free = usable - weights/int64(t)
		}
		r.freeTP[i] = max(0, free)
	}
	return nil
}

func (r *nitsumRun) gpus() int { return r.cluster.GPUs() }

// setup builds the first instances.
func (r *nitsumRun) setup() error {
	o := r.o
	r.clk = clock.NewFake(r.epoch)
	var specs []nitsum.Instance
	switch o.System {
	case SystemNitsum, SystemStaticPlan:
		pl, err := nitsum.NewPlanner(o.Tiers, o.Profile, r.gpus(), nitsum.Options{NodeGPUs: o.Cost.Node.Count, Plain: o.Plain})
		if err != nil {
			return err
		}
		r.planner = pl
		// The first plan: the mean rates of the trace (static) or of the
		// first window, as if the system had been running (inferred: a
		// warm start, so the first window is not served by an empty plan).
		span := o.Window.Seconds()
		if o.System == SystemStaticPlan {
			span = max(o.Requests[len(o.Requests)-1].Arrival-o.Requests[0].Arrival, 1e-9)
		}
		rates := make([]float64, o.Tiers.Len())
		for _, q := range o.Requests {
			if q.Arrival-o.Requests[0].Arrival <= span {
				rates[q.Tier] += 1 / span
			}
		}
		plan, err := r.plan(rates)
		if err != nil {
			return err
		}
		r.res.Plans++
		specs = plan.Instances
		r.dispSet = o.Tiers
		if o.System == SystemNitsum {
			m, err := nitsum.NewMeter(r.clk, o.Tiers.Len(), o.Window)
			if err != nil {
				return err
			}
			r.meter = m
			r.push(nitsumEvent{t: o.Window.Seconds(), kind: evTick})
		}
	case SystemVanilla, SystemPD:
		r.untiered = true
		t := o.TP
		n := r.gpus() / t
		if n < 1 || (o.System == SystemPD && n < 2) {
			return fmt.Errorf("sim: nitsum run: %s at TP%d needs more than %d GPUs", o.System, t, r.gpus())
		}
		for k := range n {
			role := nitsum.Prefill
			if o.System == SystemPD && k >= n/2 {
				role = nitsum.Decode
			}
			specs = append(specs, nitsum.Instance{Tier: 0, Role: role, TP: t, FirstGPU: k * t, Batch: SGLangMaxRunning})
		}
	case SystemSLOBatch:
		r.untiered = true
		var err error
		specs, err = r.sloBatchInstances()
		if err != nil {
			return err
		}
	case SystemSplit, SystemTierSplit:
		r.reject = o.System == SystemSplit
		var err error
		specs, err = r.splitInstances()
		if err != nil {
			return err
		}
		r.dispSet = o.Tiers
	default:
		return fmt.Errorf("sim: nitsum run: unknown system %d", o.System)
	}
	return r.install(specs, nil)
}

// install makes specs the live instances. keep maps a spec index to an
// existing instance that carries on unchanged.
func (r *nitsumRun) install(specs []nitsum.Instance, keep map[int]*instance) error {
	var insts []*instance
	for i, sp := range specs {
		if in := keep[i]; in != nil {
			in.spec = sp
			insts = append(insts, in)
			continue
		}
		ti, ok := r.tpIndex[sp.TP]
		if !ok {
			return fmt.Errorf("sim: nitsum run: instance at TP%d, which is not profiled", sp.TP)
		}
		in := &instance{spec: sp, lc: r.prof.Layout(ti), colocated: r.o.System == SystemVanilla}
		in.cap = sp.Batch
		if in.cap < 1 {
			in.cap = SGLangMaxRunning
		}
		lb := in.cap
		if r.untiered && (r.o.System == SystemVanilla || r.o.System == SystemPD) {
			lb = SGLangMaxRunning
		}
		l, err := nitsum.NewLocal(lb)
		if err != nil {
			return err
		}
		if (r.o.System == SystemNitsum || r.o.System == SystemStaticPlan) && !r.o.OldestBestEffort {
			l.BestEffortNewestFirst()
		}
		in.local = l
		in.kvCap = int64(sp.TP) * r.freeTP[ti] / r.kvTok
		insts = append(insts, in)
	}
	r.insts = insts
	if r.dispSet != nil {
		disp, err := nitsum.NewDispatcher(r.dispSet, instanceSpecs(insts))
		if err != nil {
			return err
		}
		r.disp = disp
	}
	r.gen++
	for _, in := range insts {
		in.gen = r.gen
	}
	return nil
}

func instanceSpecs(insts []*instance) []nitsum.Instance {
	out := make([]nitsum.Instance, len(insts))
	for i, in := range insts {
		out[i] = in.spec
	}
	return out
}

func (r *nitsumRun) push(e nitsumEvent) {
	e.seq = r.seq
	r.seq++
	heap.Push(&r.events, e)
}

func (r *nitsumRun) handle(e nitsumEvent) error {
	switch e.kind {
	case evArrive:
		if r.meter != nil {
			if err := r.meter.Observe(r.reqs[e.req].Tier); err != nil {
				return err
			}
		}
		return r.route(e.req)
	case evDone:
		return r.done(e.in)
	case evHandoff:
		in := e.in
		if in.retired {
			return r.toDecode(e.req, -1)
		}
		// The class travels with the request: the decode instance's local
		// scheduler serves feasible requests before best-effort ones (L4).
		in.local.Push(nitsum.Request{ID: strconv.Itoa(e.req), Tier: r.reqs[e.req].Tier}, r.st[e.req].class)
		r.kick(in)
	case evTick:
		// The control loop runs while requests arrive: after the last
		// arrival the last plan stays, so the backlog drains (the end of
		// the trace is not a drop in demand the planner should follow).
		if r.now > r.reqs[len(r.reqs)-1].Arrival {
			return nil
		}
		if err := r.replan(); err != nil {
			return err
		}
		r.push(nitsumEvent{t: r.now + r.o.Window.Seconds(), kind: evTick})
	case evReady:
		r.kick(e.in)
	}
	return nil
}

// route places an arriving (or re-placed waiting) request on a prefill
// instance.
func (r *nitsumRun) route(i int) error {
	q := r.reqs[i]
	id := strconv.Itoa(i)
	if r.disp == nil { // round-robin baselines
		var pre []*instance
		for _, in := range r.insts {
			if in.spec.Role == nitsum.Prefill {
				pre = append(pre, in)
			}
		}
		in := pre[r.rr%len(pre)]
		r.rr++
		in.local.Push(nitsum.Request{ID: id, Tier: q.Tier}, nitsum.Feasible)
		r.kick(in)
		return nil
	}
	tier := q.Tier
	if r.untiered {
		tier = 0
	}
	a, err := r.disp.Dispatch(nitsum.Request{ID: id, Tier: tier})
	if errors.Is(err, nitsum.ErrNoInstance) {
		r.pending = append(r.pending, i)
		return nil
	}
	if err != nil {
		return err
	}
	if r.reject && a.Class == nitsum.BestEffort {
		if _, err := r.disp.Done(id); err != nil {
			return err
		}
		r.out[i].Rejected = true
		return nil
	}
	if r.o.System == SystemTierSplit && a.Class == nitsum.BestEffort {
		if a, err = r.deferInGroup(id, tier, a); err != nil {
			return err
		}
	}
	r.st[i].gen, r.st[i].class = r.gen, a.Class
	in := r.insts[a.Instance]
	in.local.Push(nitsum.Request{ID: id, Tier: tier}, a.Class)
	r.kick(in)
	return nil
}

// deferInGroup moves a best-effort request that the Dispatcher spilled
// to another tier's prefill instance onto one of its own tier's, round
// robin: SystemTierSplit's groups do not share GPUs.
func (r *nitsumRun) deferInGroup(id string, tier int, a nitsum.Assignment) (nitsum.Assignment, error) {
	if r.insts[a.Instance].spec.Tier == tier {
		return a, nil
	}
	var own []int
	for k, in := range r.insts {
		if in.spec.Role == nitsum.Prefill && in.spec.Tier == tier {
			own = append(own, k)
		}
	}
	if len(own) == 0 {
		return a, nil
	}
	if _, err := r.disp.Done(id); err != nil {
		return a, err
	}
	a = nitsum.Assignment{Instance: own[r.rr%len(own)], Class: nitsum.BestEffort}
	r.rr++
	return a, r.disp.Place(nitsum.Request{ID: id, Tier: tier}, a)
}

// kick starts in's next iteration if it is free and has work.
func (r *nitsumRun) kick(in *instance) {
	if in.busy || in.retired {
		return
	}
	if r.now < in.ready {
		return // an evReady event is pending
	}
	var secs float64
	switch {
	case in.spec.Role == nitsum.Prefill && !in.colocated:
		secs = r.startPrefill(in)
	case in.colocated:
		if secs = r.startColocatedPrefill(in); secs == 0 {
			secs = r.startDecode(in)
		}
	default:
		secs = r.startDecode(in)
	}
	if secs == 0 {
		return
	}
	in.busy, in.until = true, r.now+secs
	r.push(nitsumEvent{t: in.until, kind: evDone, in: in})
}

func reqIndex(q nitsum.Request) int {
	i, _ := strconv.Atoi(q.ID)
	return i
}

// takePrefill fills in.inFlight from the local queues: up to the batch cap
// (the profiled B^P) for SLO-aware systems, up to SGLang's token budget
// for the others; it returns the step's seconds, 0 with nothing queued.
func (r *nitsumRun) takePrefill(in *instance, room int) float64 {
	in.inFlight = in.inFlight[:0]
	var buf []nitsum.Request
	if r.disp != nil {
		buf = in.local.NextBatch(buf, room)
	} else {
		tokens := 0
		for len(buf) < room {
			n := len(buf)
			buf = in.local.NextBatch(buf, 1)
			if len(buf) == n {
				break
			}
			tokens += r.reqs[reqIndex(buf[n])].Input
			if tokens >= SGLangChunkTokens {
				break
			}
		}
	}
	if len(buf) == 0 {
		return 0
	}
	r.shape.Seqs = r.shape.Seqs[:0]
	for _, q := range buf {
		i := reqIndex(q)
		in.inFlight = append(in.inFlight, i)
		r.shape.Seqs = append(r.shape.Seqs, Seq{New: r.reqs[i].Input, Logits: 1})
	}
	in.prefill = true
	return in.lc.Step(&r.shape).Seconds
}

func (r *nitsumRun) startPrefill(in *instance) float64 {
	return r.takePrefill(in, in.local.Batch())
}

// startColocatedPrefill runs a prefill batch on a colocated instance when
// it has queued requests and room for them (SGLang's prefill-first
// schedule).
func (r *nitsumRun) startColocatedPrefill(in *instance) float64 {
	room := SGLangMaxRunning - len(in.running)
	if room <= 0 || in.kvUsed >= in.kvCap {
		return 0
	}
	return r.takePrefill(in, room)
}

// startDecode admits what fits (migrated requests first, then the local
// queues) and runs one decode step of the running requests.
func (r *nitsumRun) startDecode(in *instance) float64 {
	if !in.colocated {
		keep := in.migrated[:0]
		for _, i := range in.migrated {
			if r.out[i].Finished {
				continue
			}
			if in.kvUsed+r.st[i].kv <= in.kvCap || len(in.running) == 0 {
				r.admit(in, i)
			} else {
				keep = append(keep, i)
			}
		}
		in.migrated = keep
		for len(in.running) < in.cap {
			b := in.local.NextBatch(nil, 1)
			if len(b) == 0 {
				break
			}
			i := reqIndex(b[0])
			need := int64(r.reqs[i].Input + r.reqs[i].Output)
			if in.kvUsed+need > in.kvCap && len(in.running) > 0 {
				in.migrated = append(in.migrated, i) // waits for KV room, ahead of later arrivals
				r.st[i].kv = need
				break
			}
			r.st[i].kv = need
			r.admit(in, i)
		}
	}
	if len(in.running) == 0 {
		return 0
	}
	r.shape.Seqs = r.shape.Seqs[:0]
	in.inFlight = append(in.inFlight[:0], in.running...)
	for _, i := range in.inFlight {
		r.shape.Seqs = append(r.shape.Seqs, Seq{Context: r.reqs[i].Input + r.st[i].generated - 1, New: 1, Logits: 1})
	}
	in.prefill = false
	return in.lc.Step(&r.shape).Seconds
}

func (r *nitsumRun) admit(in *instance, i int) {
	in.running = append(in.running, i)
	in.kvUsed += r.st[i].kv
	r.st[i].inst = in
}

// done ends in's iteration.
func (r *nitsumRun) done(in *instance) error {
	in.busy = false
	if in.prefill {
		for _, i := range in.inFlight {
			r.st[i].generated = 1
			r.out[i].First, r.out[i].Last = r.now, r.now
			if r.disp != nil && r.st[i].gen == r.gen {
				if _, err := r.disp.Done(strconv.Itoa(i)); err != nil {
					return err
				}
			}
			if r.reqs[i].Output == 1 {
				r.out[i].Finished = true
				continue
			}
			if in.colocated {
				r.st[i].kv = int64(r.reqs[i].Input + r.reqs[i].Output)
				r.admit(in, i)
				continue
			}
			if err := r.toDecode(i, in.spec.FirstGPU); err != nil {
				return err
			}
		}
	} else {
		for _, i := range in.inFlight {
			if r.out[i].Finished {
				continue
			}
			r.st[i].generated++
			r.out[i].Last = r.now
			if r.st[i].generated >= r.reqs[i].Output {
				r.out[i].Finished = true
				if h := r.st[i].inst; h != nil {
					h.kvUsed -= r.st[i].kv
					h.running = slices.DeleteFunc(h.running, func(x int) bool { return x == i })
				}
			}
		}
	}
	in.inFlight = in.inFlight[:0]
	if in.retired {
		return nil
	}
	r.kick(in)
	return nil
}

// decodeFor picks the decode instance for a request of tier s: the
// least-loaded live one of its tier, else of any tier; nil with none.
func (r *nitsumRun) decodeFor(s int) *instance {
	var best, any *instance
	for _, in := range r.insts {
		if in.retired || in.spec.Role != nitsum.Decode {
			continue
		}
		if any == nil || in.load() < any.load() {
			any = in
		}
		if (r.untiered || in.spec.Tier == s) && (best == nil || in.load() < best.load()) {
			best = in
		}
	}
	if best != nil {
		return best
	}
	return any
}

// toDecode hands request i's KV from the prefill instance at GPU from (-1:
// already moved) to a decode instance over the pool's links.
func (r *nitsumRun) toDecode(i, from int) error {
	d := r.decodeFor(r.reqs[i].Tier)
	if d == nil {
		r.pending = append(r.pending, -1-i) // waits for a decode instance
		return nil
	}
	t := 0.0
	if from >= 0 {
		bytes := int64(r.reqs[i].Input) * r.kvTok
		link := r.cluster.PairLink(from, d.spec.FirstGPU, 1)
		t = r.o.Cost.Collective(comm.KindSend, bytes/int64(max(1, d.spec.TP)), 2, link)
	}
	r.push(nitsumEvent{t: r.now + t, kind: evHandoff, req: i, in: d})
	return nil
}

// plan runs the planner: PlanFilled, or Plan under NoFill.
func (r *nitsumRun) plan(rates []float64) (*nitsum.Plan, error) {
	if r.o.NoFill {
		return r.planner.Plan(rates)
	}
	return r.planner.PlanFilled(rates)
}

// rates is the planner's input: the last window's rates, or their mean
// over the profile window.
func (r *nitsumRun) rates() []float64 {
	last := r.meter.Rates(nil)
	k := 1
	if pw := r.o.ProfileWindow; pw > r.o.Window {
		k = int((pw + r.o.Window - 1) / r.o.Window)
	}
	r.history = append(r.history, last)
	if len(r.history) > k {
		r.history = r.history[len(r.history)-k:]
	}
	out := make([]float64, len(last))
	for _, h := range r.history {
		for s, v := range h {
			out[s] += v / float64(len(r.history))
		}
	}
	return out
}

// replan is one control window's end: the planner's plan from the last
// window's rates and, when it changes the instances, the reconfiguration
// (stop and migrate, K1–K6) in four steps: match the instances that carry
// on, retire the rest and collect their requests, move the running ones'
// KV and pause the instances that receive it or are new, and place the
// waiting requests again.
func (r *nitsumRun) replan() error {
	plan, err := r.plan(r.rates())
	if err != nil {
		return err
	}
	r.res.Plans++
	// Instances that carry on keep their GPUs (nitsum.Plan.KeepPlaces):
	// the fresh layout would shift every block after a changed one.
	plan.KeepPlaces(instanceSpecs(r.insts))
	old := r.insts
	same := len(old) == len(plan.Instances)
	for k := 0; same && k < len(old); k++ {
		same = sameInstance(old[k].spec, plan.Instances[k])
	}
	if same {
		r.retryPending()
		return nil
	}
	r.res.Reconfigs++
	keep, reused := matchInstances(old, plan.Instances)
	mv := r.retire(old, reused)
	if err := r.install(plan.Instances, keep); err != nil {
		return err
	}
	if err := r.placeInFlight(keep); err != nil {
		return err
	}
	recv := r.moveDecodes(mv)
	r.pause(keep, mv.retired, recv)
	if err := r.reroute(mv.waiting); err != nil {
		return err
	}
	r.retryPending()
	for _, in := range r.insts {
		r.kick(in)
	}
	return nil
}

// placeInFlight registers with the new plan's Dispatcher the prompts of
// the prefill iteration in progress on each instance that carries on:
// they are assigned and unfinished, so they hold its bandwidth (G3,
// pitfall 20) until their iteration ends, as they did under the old one.
func (r *nitsumRun) placeInFlight(keep map[int]*instance) error {
	for k, in := range keep {
		if !in.busy || !in.prefill {
			continue
		}
		for _, i := range in.inFlight {
			a := nitsum.Assignment{Instance: k, Class: r.st[i].class}
			if err := r.disp.Place(nitsum.Request{ID: strconv.Itoa(i), Tier: r.reqs[i].Tier}, a); err != nil {
				return err
			}
			r.st[i].gen = r.gen
		}
	}
	return nil
}

// matchInstances pairs each new spec with an unchanged old instance
// (same tier, role, degree, first GPU and cap), which carries on.
func matchInstances(old []*instance, specs []nitsum.Instance) (keep map[int]*instance, reused map[*instance]bool) {
	keep, reused = map[int]*instance{}, map[*instance]bool{}
	for k, sp := range specs {
		for _, in := range old {
			if !reused[in] && sameInstance(in.spec, sp) {
				keep[k], reused[in] = in, true
				break
			}
		}
	}
	return keep, reused
}

// moves is what a reconfiguration takes off the old instances.
type moves struct {
	waiting []int           // queued for prefill: placed again as metadata (K2)
	moving  []int           // decode requests; -1-i for one whose KV was never admitted (a plain hand-off)
	from    map[int]float64 // a moving request's source: when its iteration in progress ends
	retired []*instance     // the old instances that do not carry on
}

// retire empties every prefill queue (waiting requests are placed again
// under the new plan) and marks the instances that do not carry on
// retired, taking their decode requests.
func (r *nitsumRun) retire(old []*instance, reused map[*instance]bool) moves {
	mv := moves{from: map[int]float64{}}
	drain := func(in *instance, f func(int)) {
		for {
			b := in.local.NextBatch(nil, math.MaxInt)
			if len(b) == 0 {
				return
			}
			for _, q := range b {
				f(reqIndex(q))
			}
		}
	}
	for _, in := range old {
		if in.spec.Role == nitsum.Prefill || in.spec.Role == nitsum.Spare {
			drain(in, func(i int) { mv.waiting = append(mv.waiting, i) })
		}
		if reused[in] {
			continue
		}
		in.retired = true
		mv.retired = append(mv.retired, in)
		if in.spec.Role != nitsum.Decode {
			continue
		}
		if in.busy {
			for _, i := range in.running {
				mv.from[i] = in.until
			}
		}
		mv.moving = append(mv.moving, in.running...)
		mv.moving = append(mv.moving, in.migrated...)
		drain(in, func(i int) { mv.moving = append(mv.moving, -1-i) })
		in.running, in.migrated = nil, nil
	}
	return mv
}

// received is the KV an instance receives in a reconfiguration.
type received struct {
	bytes float64 // KV bytes, all its GPUs together
	after float64 // not before: the end of the sources' iterations in progress
}

// moveDecodes gives every moving decode request to a decode instance of
// its tier under the new plan (any tier's when its own has none, pending
// when there is none).
func (r *nitsumRun) moveDecodes(mv moves) map[*instance]received {
	recv := map[*instance]received{}
	for _, m := range mv.moving {
		i, hasKV := m, true
		if m < 0 {
			i, hasKV = -1-m, false
		}
		if r.out[i].Finished {
			continue
		}
		d := r.decodeFor(r.reqs[i].Tier)
		if d == nil {
			r.pending = append(r.pending, -1-i)
			continue
		}
		if !hasKV {
			d.local.Push(nitsum.Request{ID: strconv.Itoa(i), Tier: r.reqs[i].Tier}, r.st[i].class)
			continue
		}
		r.st[i].inst = nil
		d.migrated = append(d.migrated, i)
		rc := recv[d]
		rc.bytes += float64(int64(r.reqs[i].Input+r.st[i].generated) * r.kvTok)
		rc.after = max(rc.after, mv.from[i])
		recv[d] = rc
	}
	return recv
}

// pause stops the instances the reconfiguration touches: one that
// receives KV stops for the migration (K6) once its sources' iterations
// end; a new one also waits for the iteration in progress on its GPUs
// and, under the naive path, reloads its weights and prepares its
// kernels. Only the pauses count as GPU time lost.
func (r *nitsumRun) pause(keep map[int]*instance, retired []*instance, recv map[*instance]received) {
	for k, in := range r.insts {
		rc := recv[in]
		kept := keep[k] != nil
		if kept && rc.bytes == 0 {
			continue
		}
		start := max(r.now, rc.after)
		if kept && in.busy {
			start = max(start, in.until)
		}
		for _, o := range retired {
			if !kept && o.busy && overlaps(o.spec, in.spec) {
				start = max(start, o.until)
			}
		}
		p := 0.0
		if b := rc.bytes / float64(in.spec.TP); b > 0 {
			p = MigrationTime(r.o.Switch, b)
		}
		if !kept && r.o.Switch == NaiveSwitch {
			p += NitsumWeightReload + NitsumKernelPrep
		}
		in.ready = start + p
		r.res.PausedGPUSeconds += p * float64(in.spec.TP)
		if in.ready > r.now {
			r.push(nitsumEvent{t: in.ready, kind: evReady, in: in})
		}
	}
}

// reroute places the waiting requests under the new plan, feasible before
// best effort, each in arrival order: a request keeps its place ahead of
// or behind the others across the reconfiguration, as it would in its
// local queues.
func (r *nitsumRun) reroute(waiting []int) error {
	slices.SortFunc(waiting, func(a, b int) int {
		if ca, cb := r.st[a].class, r.st[b].class; ca != cb {
			return int(ca) - int(cb)
		}
		return a - b
	})
	for _, i := range waiting {
		if err := r.route(i); err != nil {
			return err
		}
	}
	return nil
}

// retryPending places again the requests that found no instance.
func (r *nitsumRun) retryPending() {
	p := r.pending
	r.pending = nil
	for _, m := range p {
		if m < 0 {
			_ = r.toDecode(-1-m, -1)
		} else {
			_ = r.route(m)
		}
	}
}

func sameInstance(a, b nitsum.Instance) bool {
	return a.Tier == b.Tier && a.Role == b.Role && a.TP == b.TP && a.FirstGPU == b.FirstGPU && a.Batch == b.Batch
}

func overlaps(a, b nitsum.Instance) bool {
	return a.FirstGPU < b.FirstGPU+b.TP && b.FirstGPU < a.FirstGPU+a.TP
}

func (r *nitsumRun) finish() *NitsumResult {
	res := r.res
	res.Outcomes = r.out
	res.Span = r.reqs[len(r.reqs)-1].Arrival - r.reqs[0].Arrival
	if res.Span < r.o.Window.Seconds() {
		for _, o := range r.out {
			res.Span = max(res.Span, o.Last-r.reqs[0].Arrival)
		}
	}
	res.Span = max(res.Span, 1e-9)
	for i := range r.out {
		o := &r.out[i]
		if !o.Finished {
			continue
		}
		t := r.o.Tiers.At(r.reqs[i].Tier)
		ttft, tpot := o.latencies(r.reqs[i])
		o.Good = ttft <= t.TTFT.Seconds()+1e-12 && tpot <= t.TPOT.Seconds()+1e-12
		if o.Good {
			res.Good++
		}
	}
	res.Goodput = float64(res.Good) / res.Span
	res.Attainment = float64(res.Good) / float64(len(r.reqs))
	res.Instances = instanceSpecs(r.insts)
	return res
}
