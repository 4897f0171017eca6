package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/slo"
	"github.com/gearboxlm/gearbox/specdecode"
	"github.com/gearboxlm/gearbox/tensor"
	"github.com/gearboxlm/gearbox/tokenizer"
)

// Options configure a Cluster.
type Options struct {
	Config  *model.Config
	Weights *model.Weights // the one host copy every instance's shards are cut from
	Ranks   int            // P: CPU ranks in the pool
	Tiers   *slo.Set
	// Profile is the capacity of one instance per tier and TP degree;
	// its TP degrees are the degrees an instance may take and get warm
	// executors. When it lists no degree, Measure must be set.
	Profile nitsum.Profile
	// Measure, when Profile lists no degree, measures the profile on the
	// warm executors at start-up (Cluster.Timings reports the steps).
	Measure *Measure
	// Layout is the first layout; nil asks the planner with zero rates.
	Layout []nitsum.Instance
	// Window is the control window; 0 means nitsum.DefaultWindow. A
	// negative window turns the control loop off (Reconfigure only).
	Window time.Duration
	// WeightBudget is the weight memory a rank may hold, bytes: the full
	// copy plus the column-split copies of every TP degree (see
	// WeightRule); 0 means no limit.
	WeightBudget int64
	BlockSize    int // KV block size in tokens; default 16
	NumBlocks    int // KV blocks per executor rank; default one full context
	// Sched is every instance engine's scheduler configuration; an
	// instance's profiled batch cap, when set, replaces MaxNumSeqs.
	Sched     sched.Config
	Pool      *tensor.Pool // kernel threads shared by every rank; nil runs inline
	Tokenizer *tokenizer.Tokenizer
	EOS       []int
	Clock     clock.Clock     // default the wall clock
	Observer  engine.Observer // every instance's engine reports here; may be nil
	Logger    *slog.Logger
	// Speculative is every instance engine's speculative decoding.
	Speculative specdecode.Config
	// Colocated serves whole requests on every instance, the plan's
	// decode instances included, instead of handing requests from
	// prefill to decode instances after their first token.
	Colocated bool
	// Manual starts no goroutine: no instance loops and no control loop.
	// The caller drives every instance with Iterate and the control
	// window with ControlStep (tests, on a fake clock).
	Manual bool
}

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("cluster: closed")

// Cluster is Nitsum's runtime over CPU ranks: instances of different TP
// degree on disjoint rank blocks, each an engine with its own scheduler
// and KV pool, the global Dispatcher routing requests to them, and a
// control loop that re-plans the layout every window. Submit, Abort,
// Reconfigure and Stats are safe for concurrent use.
type Cluster struct {
	opts  Options
	cfg   *model.Config
	log   *slog.Logger
	clk   clock.Clock
	meter *nitsum.Meter
	plan  *nitsum.Planner
	warm  map[blockKey]*cpuexec.Executor // every (first rank, degree) of the profile
	rule  Rule
	// maxLen is every instance engine's MaxModelLen.
	maxLen int
	// timings are the steps Options.Measure timed, by degree then batch.
	timings []Timing
	obs     observer

	ctx       context.Context // the instances' loops
	cancel    context.CancelFunc
	ctlCancel context.CancelFunc // the control loop's
	ctlWG     sync.WaitGroup

	// mu orders Submit, Abort and Reconfigure: a reconfiguration holds it
	// while the instances are paused.
	mu       sync.Mutex
	closed   bool
	draining bool
	insts    []*instance
	disp     atomic.Pointer[nitsum.Dispatcher]
	nextID   atomic.Int64
	// layoutName names the instances' degrees in rank order ("tp[1 1 2]");
	// every instance's steps report it as their plan.
	layoutName atomic.Pointer[string]

	// firsts wakes the hand-off loop: a request got its first token.
	firsts chan struct{}

	// fmu guards where, which the engines' observer calls update from
	// their loops.
	fmu   sync.Mutex
	where map[string]placed

	stats counters
}

// placed is where a live request is and how the dispatcher labelled it.
type placed struct {
	inst  *instance
	class nitsum.Class
	tier  int
}

type blockKey struct{ first, tp int }

// instance is one TP group: its spec in the layout, its warm executor,
// its engine and the goroutine driving it.
type instance struct {
	spec nitsum.Instance
	exec *cpuexec.Executor
	eng  *engine.Engine
	wake chan struct{}
	quit chan struct{} // closed to stop the loop
	done chan struct{} // closed when the loop has returned
}

// New builds the warm executors, the first layout's instances and
// engines, and starts them and the control loop. It refuses a model whose
// weights do not fit Options.WeightBudget.
func New(opts Options) (*Cluster, error) {
	if opts.Speculative.Method == specdecode.DraftModel {
		return nil, fmt.Errorf("cluster: speculative method %q is not supported under nitsum (each instance would need a draft model of its own); use \"ngram\"", specdecode.DraftModel)
	}
	degrees, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	rule, err := WeightRule(opts.Config, opts.Weights, degrees)
	if err != nil {
		return nil, err
	}
	if opts.WeightBudget > 0 && rule.PerRank() > opts.WeightBudget {
		return nil, fmt.Errorf("cluster: %w: %s, budget %d bytes per rank", ErrWeightsDoNotFit, rule, opts.WeightBudget)
	}
	meter, err := nitsum.NewMeter(opts.Clock, opts.Tiers.Len(), max(opts.Window, time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c := &Cluster{
		opts: opts, cfg: opts.Config, log: opts.Logger, clk: opts.Clock, meter: meter, rule: rule,
		warm: map[blockKey]*cpuexec.Executor{}, where: map[string]placed{}, firsts: make(chan struct{}, 1),
	}
	c.obs = observer{c: c, next: opts.Observer, lastQ: map[*engine.Engine]int64{}, lastH: map[*engine.Engine]int64{}}
	c.stats.degrees = map[int]int{}
	if err := c.buildWarm(degrees); err != nil {
		return nil, err
	}
	if len(opts.Profile.TP) == 0 {
		if err := c.measureProfile(degrees); err != nil {
			return nil, err
		}
	}
	if c.plan, err = nitsum.NewPlanner(opts.Tiers, c.opts.Profile, opts.Ranks, nitsum.Options{NodeGPUs: nodeRanks(opts.Ranks, degrees)}); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := c.firstLayout(); err != nil {
		return nil, err
	}
	c.run()
	return c, nil
}

// withDefaults checks o, fills in its defaults and returns the TP
// degrees instances may take: the profile's, or Measure's.
func (o *Options) withDefaults() ([]int, error) {
	switch {
	case o.Config == nil || o.Weights == nil:
		return nil, errors.New("cluster: a model config and weights are required")
	case o.Tiers == nil:
		return nil, errors.New("cluster: a tier set is required")
	case o.Ranks < 1:
		return nil, fmt.Errorf("cluster: want at least one rank, got %d", o.Ranks)
	case len(o.Profile.TP) == 0 && o.Measure == nil:
		return nil, errors.New("cluster: give a profile or ask for one to be measured (Options.Measure)")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Window == 0 {
		o.Window = nitsum.DefaultWindow
	}
	if o.BlockSize == 0 {
		o.BlockSize = 16
	}
	if o.NumBlocks == 0 {
		o.NumBlocks = (o.Config.MaxPositions + o.BlockSize - 1) / o.BlockSize
	}
	if len(o.Profile.TP) > 0 {
		return o.Profile.TP, nil
	}
	m := *o.Measure
	m.defaults(o.Ranks, o.Config)
	o.Measure = &m
	return m.Degrees, nil
}

// buildWarm builds the warm executor of every degree on every aligned
// block of it: its shards cut once, here (W4).
func (c *Cluster) buildWarm(degrees []int) error {
	o := c.opts
	for _, t := range degrees {
		for first := 0; first+t <= o.Ranks; first += t {
			x, err := cpuexec.NewExecutor(o.Config, o.Weights, cpuexec.Options{
				Plan: parallel.Plan{DP: 1, PP: 1, SP: 1, TP: t}, BlockSize: o.BlockSize, NumBlocks: o.NumBlocks, Pool: o.Pool, Clock: o.Clock,
			})
			if err != nil {
				return fmt.Errorf("cluster: warm executor tp=%d at rank %d: %w", t, first, err)
			}
			c.warm[blockKey{first, t}] = x
		}
	}
	return nil
}

// measureProfile times every degree's first warm executor (Options.Measure)
// and makes the planner's profile of it.
func (c *Cluster) measureProfile(degrees []int) error {
	timings := make([][]Timing, len(degrees))
	for i, t := range degrees {
		var err error
		if timings[i], err = c.measure(context.Background(), c.warm[blockKey{0, t}], t, *c.opts.Measure); err != nil {
			return err
		}
		c.timings = append(c.timings, timings[i]...)
	}
	c.opts.Profile = profileFrom(c.opts.Tiers, *c.opts.Measure, timings)
	return nil
}

// firstLayout builds the instances of Options.Layout, or of the first
// plan, and their Dispatcher. Before any traffic is measured the pool is
// laid out as equal demand from every SLO tier would have it (PlanFilled
// with the same rate for each, which only their ratio matters to), so
// each tier has instances of its own from the first request on.
func (c *Cluster) firstLayout() error {
	layout := c.opts.Layout
	if layout == nil {
		rates := make([]float64, c.opts.Tiers.Len())
		for s := range rates {
			if !c.opts.Tiers.At(s).Background {
				rates[s] = 1
			}
		}
		p, err := c.plan.PlanFilled(rates)
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		layout = p.Instances
	}
	layout = c.served(layout)
	if err := c.checkLayout(layout); err != nil {
		return err
	}
	d, err := nitsum.NewDispatcher(c.opts.Tiers, layout)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	c.disp.Store(d)
	for _, spec := range layout {
		in, err := c.newInstance(spec)
		if err != nil {
			return err
		}
		c.insts = append(c.insts, in)
		c.maxLen = in.eng.MaxModelLen()
	}
	c.recordLayout()
	return nil
}

// run starts the instances' loops, the hand-off loop and the control
// loop (none under Options.Manual).
func (c *Cluster) run() {
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for _, in := range c.insts {
		c.start(in)
	}
	ctl, ctlCancel := context.WithCancel(context.Background())
	c.ctlCancel = ctlCancel
	if c.opts.Manual {
		return
	}
	c.ctlWG.Add(1)
	go c.handOffLoop(ctl)
	if c.opts.Window > 0 {
		c.ctlWG.Add(1)
		go c.control(ctl)
	}
}

// nodeRanks is the planner's node size: the pool rounded up to a power
// of two, at least the largest degree (CPU ranks of one process share
// one node).
func nodeRanks(ranks int, tps []int) int {
	n := 1 << bits.Len(uint(ranks-1))
	for _, t := range tps {
		n = max(n, t)
	}
	return n
}

// ServedLayout returns a plan's layout as the runtime serves it. A spare
// instance becomes an instance of tier spareTier with no SLO bandwidth,
// so that it takes spilled requests as best effort (G6) besides
// background work, rather than only background work; a negative
// spareTier (no SLO tier) keeps it spare. With colocated, every decode
// instance becomes an instance that serves whole requests of its tier
// (role Prefill, its decode batch cap as its bandwidth); otherwise
// decode instances stay, and requests reach them from their tier's
// prefill instances after their first token (pd.go).
func ServedLayout(layout []nitsum.Instance, spareTier int, colocated bool) []nitsum.Instance {
	out := slices.Clone(layout)
	for i := range out {
		switch {
		case out[i].Role == nitsum.Decode && colocated:
			out[i].Role = nitsum.Prefill
			out[i].Capacity = max(1, out[i].Batch)
		case out[i].Role == nitsum.Spare && spareTier >= 0:
			out[i].Role, out[i].Tier, out[i].Capacity, out[i].Background = nitsum.Prefill, spareTier, 0, true
		}
	}
	return out
}

// served is ServedLayout under the cluster's options.
func (c *Cluster) served(layout []nitsum.Instance) []nitsum.Instance {
	return ServedLayout(layout, c.spareTier(), c.opts.Colocated)
}

// spareTier is the tier spare instances serve: the first SLO tier, -1
// when every tier is background.
func (c *Cluster) spareTier() int {
	for s := range c.opts.Tiers.Len() {
		if !c.opts.Tiers.At(s).Background {
			return s
		}
	}
	return -1
}

// checkLayout verifies that layout covers the ranks once with aligned
// blocks of degrees that have warm executors.
func (c *Cluster) checkLayout(layout []nitsum.Instance) error {
	next := 0
	for i, in := range layout {
		if in.FirstGPU != next {
			return fmt.Errorf("cluster: layout instance %d starts at rank %d, want %d (instances in rank order, covering every rank)", i, in.FirstGPU, next)
		}
		if c.warm[blockKey{in.FirstGPU, in.TP}] == nil {
			return fmt.Errorf("cluster: layout instance %d: TP %d at rank %d is not an aligned block of a profiled degree %v", i, in.TP, in.FirstGPU, c.opts.Profile.TP)
		}
		next += in.TP
	}
	if next != c.opts.Ranks {
		return fmt.Errorf("cluster: layout covers %d ranks, the pool has %d", next, c.opts.Ranks)
	}
	return nil
}

// newInstance builds an engine for spec over its warm executor.
func (c *Cluster) newInstance(spec nitsum.Instance) (*instance, error) {
	x := c.warm[blockKey{spec.FirstGPU, spec.TP}]
	sc := c.opts.Sched
	if spec.Batch > 0 {
		sc.MaxNumSeqs = spec.Batch
	}
	var self *engine.Engine
	eng, err := engine.NewEngine(engine.Options{
		Exec: x, Tokenizer: c.opts.Tokenizer, EOS: c.opts.EOS, Clock: c.clk, Sched: sc, Observer: step{&c.obs, &self}, Speculative: c.opts.Speculative,
		Logger: c.log.With("instance", fmt.Sprintf("tp%d@%d", spec.TP, spec.FirstGPU)),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: instance tp=%d at rank %d: %w", spec.TP, spec.FirstGPU, err)
	}
	self = eng
	return &instance{spec: spec, exec: x, eng: eng, wake: make(chan struct{}, 1)}, nil
}

// start runs in's loop: Iterate while there is work, else wait for a
// wake-up; requests that cannot be scheduled yet are polled.
func (c *Cluster) start(in *instance) {
	if c.opts.Manual {
		return
	}
	in.quit, in.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(in.done)
		for {
			select {
			case <-in.quit:
				return
			default:
			}
			ran, err := in.eng.Iterate(c.ctx)
			if err != nil && c.ctx.Err() == nil {
				c.log.Error("nitsum instance step failed", "tp", in.spec.TP, "first_rank", in.spec.FirstGPU, "err", err)
			}
			if ran {
				continue
			}
			var poll <-chan time.Time
			if st := in.eng.Stats(); st.Running+st.Waiting > 0 {
				poll = time.After(time.Millisecond)
			}
			select {
			case <-in.quit:
				return
			case <-in.wake:
			case <-poll:
			}
		}
	}()
}

// stop pauses in's loop after its step in progress.
func stop(in *instance) {
	if in.quit == nil {
		return // Options.Manual
	}
	close(in.quit)
	<-in.done
	in.quit, in.done = nil, nil
}

// Iterate runs one engine iteration on every instance, in rank order,
// then hands the requests that got their first token on a prefill
// instance to a decode instance, and reports whether any instance ran a
// step: the driver of Options.Manual. It must not run beside
// Reconfigure.
func (c *Cluster) Iterate(ctx context.Context) (bool, error) {
	c.mu.Lock()
	insts := slices.Clone(c.insts)
	c.mu.Unlock()
	any := false
	for _, in := range insts {
		ran, err := in.eng.Iterate(ctx)
		if err != nil {
			return any, fmt.Errorf("cluster: instance tp=%d at rank %d: %w", in.spec.TP, in.spec.FirstGPU, err)
		}
		any = any || ran
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.handOff(ctx); err != nil {
		return any, err
	}
	return any, nil
}

func (in *instance) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// Submit dispatches req to an instance (the global scheduler's rules
// G1–G7, by req.Tier, "" for the default tier) and returns its stream.
// An empty ID gets one. It fails for an unknown tier, when no instance
// may take the request (wrapping engine.ErrQueueFull, so the server
// answers 429 and the client retries), or with the engine's Submit
// errors.
func (c *Cluster) Submit(req engine.Request) (*engine.Stream, error) {
	tier, err := c.opts.Tiers.Resolve(req.Tier)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	req.Tier = c.opts.Tiers.At(tier).Name
	if req.ID == "" {
		req.ID = fmt.Sprintf("nitsum-%d", c.nextID.Add(1))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.draining {
		return nil, engine.ErrDraining
	}
	if err := c.meter.Observe(tier); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	d := c.disp.Load()
	a, err := d.Dispatch(nitsum.Request{ID: req.ID, Tier: tier})
	if errors.Is(err, nitsum.ErrNoInstance) {
		// The layout has no instance for it now: like a full queue, the
		// client should retry (HTTP 429 with Retry-After).
		return nil, fmt.Errorf("cluster: %w: %w", engine.ErrQueueFull, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	in := c.insts[a.Instance]
	req.Priority = int(a.Class)
	c.fmu.Lock()
	c.where[req.ID] = placed{inst: in, class: a.Class, tier: tier}
	c.fmu.Unlock()
	st, err := in.eng.Submit(req)
	if err != nil {
		c.fmu.Lock()
		delete(c.where, req.ID)
		c.fmu.Unlock()
		_, _ = d.Done(req.ID)
		return nil, err
	}
	c.stats.dispatched[a.Class].Add(1)
	in.signal()
	return st, nil
}

// Abort cancels a live request; it reports whether the request was live.
func (c *Cluster) Abort(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fmu.Lock()
	p, ok := c.where[id]
	c.fmu.Unlock()
	if !ok {
		return false
	}
	ok = p.inst.eng.Abort(id)
	p.inst.signal()
	return ok
}

// Profile is the capacity profile the planner uses (measured at
// start-up under Options.Measure).
func (c *Cluster) Profile() nitsum.Profile { return c.opts.Profile }

// Timings are the steps Options.Measure timed; nil without it.
func (c *Cluster) Timings() []Timing { return c.timings }

// KVBytesPerRank is the KV cache memory each rank holds over the warm
// executors it belongs to (one per degree): with NumBlocks blocks per
// executor, a rank holds NumBlocks · block bytes · Σ_t 1/t.
func (c *Cluster) KVBytesPerRank() []int64 {
	out := make([]int64, c.opts.Ranks)
	for k, x := range c.warm {
		for r, b := range x.KVBytes() {
			out[k.first+r] += b
		}
	}
	return out
}

// WeightRule is the weight memory rule the cluster was admitted under.
func (c *Cluster) WeightRule() Rule { return c.rule }

// MaxModelLen is the longest prompt plus completion an instance accepts
// (every instance serves the same model under the same limits).
func (c *Cluster) MaxModelLen() int { return c.maxLen }

// Drain stops admitting requests (Submit returns engine.ErrDraining)
// and returns a channel closed once every live request has ended.
func (c *Cluster) Drain() <-chan struct{} {
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c.fmu.Lock()
			n := len(c.where)
			c.fmu.Unlock()
			if n == 0 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return done
}

// Close stops the control loop and the instances; requests still live
// end cancelled.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.ctlCancel()
	c.ctlWG.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.cancel() // after the loops: a step in progress completes
	for _, in := range c.insts {
		stop(in)
		in.eng.Drain()
	}
	c.fmu.Lock()
	live := make(map[string]*instance, len(c.where))
	for id, p := range c.where {
		live[id] = p.inst
	}
	c.fmu.Unlock()
	for id, in := range live {
		in.eng.Abort(id)
	}
}

// observer forwards every instance engine's measurements and releases a
// finished request's bandwidth in the current Dispatcher (G7). Its calls
// come from the instances' loops with their engine's lock held: it takes
// only fmu, its own stepMu and the Dispatcher's lock.
type observer struct {
	c    *Cluster
	next engine.Observer

	// The engines' prefix-cache counters are cumulative per engine; the
	// next observer gets them cumulative over the cluster, never falling.
	stepMu        sync.Mutex
	queries, hits int64
	lastQ, lastH  map[*engine.Engine]int64
}

// step is an instance engine's Observer: it knows which engine reports.
type step struct {
	*observer
	eng **engine.Engine
}

func (s step) Step(st engine.StepStats) {
	o := s.observer
	o.stepMu.Lock()
	defer o.stepMu.Unlock()
	e := *s.eng
	// The pool's plan is the layout, not the reporting instance's degree:
	// per-instance plans would flip gearbox:parallel_plan_info between
	// the instances' degrees and count a plan switch at almost every step.
	if name := o.c.layoutName.Load(); name != nil {
		st.Plan = *name
	}
	o.queries += st.PrefixQueries - o.lastQ[e]
	o.hits += st.PrefixHits - o.lastH[e]
	o.lastQ[e], o.lastH[e] = st.PrefixQueries, st.PrefixHits
	st.PrefixQueries, st.PrefixHits = o.queries, o.hits
	if o.next != nil {
		o.next.Step(st)
	}
}

func (o *observer) FirstToken(queue, ttft time.Duration) {
	select {
	case o.c.firsts <- struct{}{}:
	default:
	}
	if o.next != nil {
		o.next.FirstToken(queue, ttft)
	}
}

func (o *observer) Token(itl time.Duration) {
	if o.next != nil {
		o.next.Token(itl)
	}
}

func (o *observer) Finish(f engine.FinishStats) {
	c := o.c
	c.fmu.Lock()
	_, ok := c.where[f.ID]
	delete(c.where, f.ID)
	c.fmu.Unlock()
	if ok {
		if _, err := c.disp.Load().Done(f.ID); err != nil {
			c.log.Error("nitsum: completion of a request the dispatcher does not hold", "id", f.ID, "err", err)
		}
		c.stats.finished.Add(1)
	}
	if o.next != nil {
		o.next.Finish(f)
	}
}
