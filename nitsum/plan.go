package nitsum

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/gearboxlm/gearbox/slo"
)

// Role is what an instance of a plan does.
type Role uint8

const (
	Prefill Role = iota // computes the prompts of its tier
	Decode              // generates the output tokens of its tier
	Spare               // serves no tier: GPUs the plan did not need, given background work
)

func (r Role) String() string {
	switch r {
	case Prefill:
		return "prefill"
	case Decode:
		return "decode"
	case Spare:
		return "spare"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// Capacity is what one instance of one TP degree sustains for one tier
// while every request meets the tier's targets: the paper's X^P, X^D
// (here in requests per second, not tokens; the profile's builder
// converts with the tier's mean prompt and output lengths) and the batch
// sizes B^P, B^D that reach them. A zero throughput means the instance
// cannot meet the target at any batch size.
type Capacity struct {
	Prefill      float64 // X^P: req/s of prompts, each finished within TTFT
	Decode       float64 // X^D: req/s of requests decoded with every token within TPOT
	PrefillBatch int     // B^P: requests per prefill batch at that throughput
	DecodeBatch  int     // B^D: requests per decode batch at that throughput
}

// Profile is the planner's view of the offline profile: for every tier
// and TP degree, what one instance sustains under the tier's targets.
// The simulator or a measured profile fills it; it does not depend on the
// traffic.
type Profile struct {
	// TP lists the TP degrees an instance may take, ascending powers of
	// two, e.g. {1, 2, 4, 8}.
	TP []int
	// Cap[s][i] is tier s at degree TP[i], for every tier of the set in
	// its order. Rows of background tiers are ignored.
	Cap [][]Capacity
}

// Options tune a Planner.
type Options struct {
	// NodeGPUs is the number of GPUs per node, a power of two; no TP
	// group spans two nodes. 0 means 8.
	NodeGPUs int
	// Plain ranks moves by marginal goodput efficiency alone, without the
	// unmet-demand weight: the greedy the paper improves on, kept for
	// ablations.
	Plain bool
}

// Group is a number of like instances of one tier.
type Group struct {
	Role  Role
	TP    int
	Count int
}

// TierPlan is what a plan gives one tier.
type TierPlan struct {
	Rate     float64 // λ_s, req/s, as given to Plan
	Capacity float64 // req/s the tier's instances sustain within its targets: min(prefill, decode)
	Served   float64 // min(Capacity, Rate): the goodput the plan expects
	GPUs     int     // prefill and decode GPUs together
	Feasible bool    // some prefill degree and some decode degree meet its targets
	Groups   []Group // prefill groups before decode ones, each by ascending TP
}

// Unmet is the demand the plan leaves unserved, req/s.
func (t TierPlan) Unmet() float64 { return max(0, t.Rate-t.Served) }

// Efficiency is the tier's goodput efficiency: Served per GPU, decode
// GPUs included; 0 with no GPUs.
func (t TierPlan) Efficiency() float64 {
	if t.GPUs == 0 {
		return 0
	}
	return t.Served / float64(t.GPUs)
}

// Instance is one TP group of a plan, the unit the dispatcher routes to.
type Instance struct {
	Tier     int  // index in the tier set; -1 for a spare instance
	Role     Role // prefill, decode or spare
	TP       int
	FirstGPU int // the instance owns GPUs [FirstGPU, FirstGPU+TP); FirstGPU is a multiple of TP
	// Capacity is a prefill instance's SLO-compliant bandwidth in
	// requests in flight: X^P·TTFT (Little's law: at X^P req/s each
	// spending at most TTFT there), rounded down, at least 1. 0 for
	// decode and spare instances, which the dispatcher does not route
	// SLO requests to.
	Capacity int
	// Batch is the profiled batch cap, B^P or B^D; 0 for a spare
	// instance, whose background work has no latency target and so no
	// profiled cap (the engine's own limits apply).
	Batch int
	// Background says the instance accepts background requests.
	Background bool
}

// Plan is one control window's configuration of the pool.
type Plan struct {
	GPUs      int        // N, the pool size
	Tiers     []TierPlan // by tier index
	Instances []Instance // by ascending FirstGPU, covering GPUs [0, N) once
}

// Used is the number of GPUs given to tiers.
func (p *Plan) Used() int {
	n := 0
	for _, t := range p.Tiers {
		n += t.GPUs
	}
	return n
}

// Served is the goodput the plan expects over all tiers, req/s.
func (p *Plan) Served() float64 {
	s := 0.0
	for _, t := range p.Tiers {
		s += t.Served
	}
	return s
}

// Efficiency is the pool's goodput efficiency: Served per GPU given to
// tiers; 0 with none given.
func (p *Plan) Efficiency() float64 {
	if u := p.Used(); u > 0 {
		return p.Served() / float64(u)
	}
	return 0
}

// option is one TP degree a tier can use for one role.
type option struct {
	i     int     // index in Profile.TP
	tp    int     // GPUs
	x     float64 // req/s per instance
	batch int
	// ge is a prefill option's goodput efficiency as a configuration:
	// req/s per GPU of the instance with its balanced share of decode at
	// the tier's most efficient decode degree, 1/(tp/x + 1/max(X^D/t)).
	ge float64
}

// cover is a decode allocation: n1 instances of option o1 and n2 of o2.
type cover struct {
	o1, o2 int // indices into the tier's decode options; -1 when unused
	n1, n2 int
	gpus   int
	x      float64 // req/s the instances sustain
}

// Planner computes plans (the paper's goodput-efficiency planner,
// §3.3.1) for one tier set, profile and pool. It is not safe for
// concurrent use: it keeps scratch space between calls. Planning is meant
// to run off the request path, once per control window.
type Planner struct {
	tiers    *slo.Set
	tp       []int
	gpus     int
	opt      Options
	pre, dec [][]option // per tier, the usable degrees of each role
	inFlight [][]int    // per tier and prefill option, Instance.Capacity

	// scratch, per Plan call
	p, served []float64
	decode    []cover
	count     [][]int // per tier and prefill option, instances
}

// NewPlanner checks the profile against the tiers and the pool of gpus
// GPUs and returns a Planner.
func NewPlanner(tiers *slo.Set, prof Profile, gpus int, opt Options) (*Planner, error) {
	if tiers == nil {
		return nil, errors.New("nitsum: planner: no tier set")
	}
	if gpus < 1 {
		return nil, fmt.Errorf("nitsum: planner: the pool must have at least one GPU, got %d", gpus)
	}
	if opt.NodeGPUs == 0 {
		opt.NodeGPUs = 8
	}
	if opt.NodeGPUs < 1 || bits.OnesCount(uint(opt.NodeGPUs)) != 1 {
		return nil, fmt.Errorf("nitsum: planner: GPUs per node must be a power of two, got %d", opt.NodeGPUs)
	}
	if err := checkProfile(tiers, prof, opt.NodeGPUs); err != nil {
		return nil, fmt.Errorf("nitsum: planner: %w", err)
	}
	n := tiers.Len()
	pl := &Planner{
		tiers: tiers, tp: slices.Clone(prof.TP), gpus: gpus, opt: opt,
		pre: make([][]option, n), dec: make([][]option, n), inFlight: make([][]int, n),
		p: make([]float64, n), served: make([]float64, n), decode: make([]cover, n), count: make([][]int, n),
	}
	// Stage 1's static part: the degrees at which each tier's prefill and
	// decode meet its targets at all.
	for s := range n {
		t := tiers.At(s)
		if t.Background {
			continue
		}
		for i, c := range prof.Cap[s] {
			if c.Prefill > 0 {
				pl.pre[s] = append(pl.pre[s], option{i: i, tp: prof.TP[i], x: c.Prefill, batch: c.PrefillBatch})
				pl.inFlight[s] = append(pl.inFlight[s], max(1, int(math.Floor(c.Prefill*t.TTFT.Seconds()+1e-9))))
			}
			if c.Decode > 0 {
				pl.dec[s] = append(pl.dec[s], option{i: i, tp: prof.TP[i], x: c.Decode, batch: c.DecodeBatch})
			}
		}
		pl.count[s] = make([]int, len(pl.pre[s]))
		perGPU := 0.0 // the tier's best decode req/s per GPU
		for _, d := range pl.dec[s] {
			perGPU = max(perGPU, d.x/float64(d.tp))
		}
		for o := range pl.pre[s] {
			if perGPU > 0 {
				po := &pl.pre[s][o]
				po.ge = 1 / (float64(po.tp)/po.x + 1/perGPU)
			}
		}
	}
	return pl, nil
}

func checkProfile(tiers *slo.Set, prof Profile, nodeGPUs int) error {
	if len(prof.TP) == 0 {
		return errors.New("profile: no TP degrees")
	}
	for i, t := range prof.TP {
		if t < 1 || bits.OnesCount(uint(t)) != 1 {
			return fmt.Errorf("profile: TP[%d] = %d is not a power of two", i, t)
		}
		if i > 0 && t <= prof.TP[i-1] {
			return fmt.Errorf("profile: TP degrees must ascend, got %v", prof.TP)
		}
		if t > nodeGPUs {
			return fmt.Errorf("profile: TP[%d] = %d spans more than a node of %d GPUs", i, t, nodeGPUs)
		}
	}
	if len(prof.Cap) != tiers.Len() {
		return fmt.Errorf("profile: %d rows of capacities for %d tiers", len(prof.Cap), tiers.Len())
	}
	for s, row := range prof.Cap {
		if tiers.At(s).Background {
			continue
		}
		name := tiers.At(s).Name
		if len(row) != len(prof.TP) {
			return fmt.Errorf("profile: tier %q has %d capacities for %d TP degrees", name, len(row), len(prof.TP))
		}
		for i, c := range row {
			at := fmt.Sprintf("profile: tier %q at TP%d", name, prof.TP[i])
			if !(c.Prefill >= 0) || !(c.Decode >= 0) || math.IsInf(c.Prefill, 1) || math.IsInf(c.Decode, 1) {
				return fmt.Errorf("%s: throughputs must be finite and non-negative, got prefill %v, decode %v", at, c.Prefill, c.Decode)
			}
			if c.Prefill > 0 && c.PrefillBatch < 1 {
				return fmt.Errorf("%s: prefill throughput %v needs a batch size of at least 1, got %d", at, c.Prefill, c.PrefillBatch)
			}
			if c.Decode > 0 && c.DecodeBatch < 1 {
				return fmt.Errorf("%s: decode throughput %v needs a batch size of at least 1, got %d", at, c.Decode, c.DecodeBatch)
			}
		}
	}
	return nil
}

// Plan assigns the pool to the tiers for arrival rates λ_s (req/s over
// the last control window, one per tier; background tiers' are ignored).
// The same rates always give the same plan.
//
// Stage 1 enumerates, per tier, its configurations: a prefill TP degree
// t_P and the decode instances that balance it. The decode side is always
// re-chosen as the fewest GPUs whose decode capacity covers the tier's
// prefill capacity P_s (§3.3.1: P and D are balanced so that n^P·X^P =
// n^D·X^D, pitfall 5; the rate cap then applies to the goodput, not to
// the decode side, because a prefill instance runs at its capacity
// whenever it has work, best-effort requests included, and decode sized
// below that would queue them); it is a bulk of one degree plus a
// remainder of one degree, searched over |T|² pairs. Each prefill degree
// is rated as a configuration: its goodput efficiency GE_{s,t_P} is the
// req/s per GPU of the instance together with its balanced share of
// decode at the tier's most efficient decode degree,
// 1/(t_P/X^P + 1/max_t(X^D_{s,t}/t)). Stage 2 is the weighted greedy: each
// move adds one prefill instance of degree t_P to tier s with the decode
// GPUs its new capacity needs, and the move taken is the one that fits
// with the highest score
//
//	score(s, t_P) = GE_{s,t_P} × gain / X^P_{s,t_P} × unmet_s / λ_s
//	gain   = min(P_s + X^P_{s,t_P}, λ_s) − min(P_s, λ_s)   (req/s)
//	unmet_s = λ_s − min(P_s, λ_s)                         (req/s, before the move)
//
// that is, the marginal goodput efficiency (goodput per GPU, decode
// included, pitfall 4: the configuration's GE times the part of the new
// instance's capacity the rate can use) weighted by the share of the
// tier's demand still unmet (Options.Plain drops the weight). Rating the
// configuration rather than the move's own GPUs matters for a tier's first
// move, which must bring a whole decode instance: charged to that move,
// it made large prefill degrees look best (on R3's pool at 30 and 30 req/s
// a TP4 strict prefill, 45 req/s served, where TP1 serves 55;
// TestPlanRatesConfigurations). The paper's weight is stripped from the
// text; it "prioritizes tiers with higher unmet demand" so that tiers of
// low efficiency are not starved (§3.3.1). The share is this package's
// reading: weighted by the unmet req/s themselves, a tier whose window
// count is a few times another's takes the whole of an overloaded pool (at
// 16 and 57 req/s on eight H100s the 16 req/s tier got no GPU), while the
// share gives every tier with no GPU yet the same weight, 1, and then falls
// as its demand is met. Moves that need more GPUs than are left are
// skipped; the loop stops when no move fits or no demand is unmet. Ties go
// to the lower tier index (higher priority), then the lower degree. A tier
// k times less efficient than another gets GPUs once the other's unmet
// share is below 1/k of its own, where the plain greedy first meets the
// other tier in full. The candidates per move are |tiers|·|T| (each with a
// |T|² decode cover), and there are at most N moves, so the cost does not
// grow with the configurations of the whole pool (pitfall 9).
//
// GPUs are then laid out in aligned power-of-two blocks: instances in
// descending TP order from GPU 0, so each starts at a multiple of its
// degree and none spans a node. GPUs no tier needs become TP1 spare
// instances that take background work; with none spare, every prefill
// instance accepts background work (its local scheduler serves it last).
func (pl *Planner) Plan(rates []float64) (*Plan, error) {
	n := pl.tiers.Len()
	if len(rates) != n {
		return nil, fmt.Errorf("nitsum: plan: %d rates for %d tiers", len(rates), n)
	}
	for s, r := range rates {
		if !(r >= 0) || math.IsInf(r, 1) {
			return nil, fmt.Errorf("nitsum: plan: tier %q: rate must be finite and non-negative, got %v", pl.tiers.At(s).Name, r)
		}
	}
	for s := range n {
		pl.p[s], pl.served[s], pl.decode[s] = 0, 0, cover{o1: -1, o2: -1}
		clear(pl.count[s])
	}
	left := pl.gpus
	for {
		s, o, c, cost := pl.bestMove(rates, left)
		if s < 0 {
			break
		}
		pl.p[s] += pl.pre[s][o].x
		pl.served[s] = min(pl.p[s], rates[s])
		pl.decode[s] = c
		pl.count[s][o]++
		left -= cost
	}
	return pl.layout(rates), nil
}

// bestMove returns the tier, prefill option, decode cover and GPU cost of
// the best-scoring move that fits in left GPUs, or s = -1.
func (pl *Planner) bestMove(rates []float64, left int) (bestS, bestO int, bestC cover, bestCost int) {
	bestS, bestScore := -1, 0.0
	for s := range pl.pre {
		lambda := rates[s]
		unmet := lambda - pl.served[s]
		if len(pl.dec[s]) == 0 || unmet <= 1e-9*max(1, lambda) {
			continue
		}
		weight := unmet / lambda
		if pl.opt.Plain {
			weight = 1
		}
		for o, po := range pl.pre[s] {
			if po.tp > left {
				continue
			}
			target := min(pl.p[s]+po.x, lambda)
			c := pl.cover(s, pl.p[s]+po.x)
			cost := po.tp + c.gpus - pl.decode[s].gpus
			if cost > left && target < pl.p[s]+po.x {
				// Balanced does not fit: decode for the capped goodput.
				c = pl.cover(s, target)
				cost = po.tp + c.gpus - pl.decode[s].gpus
			}
			if cost > left {
				continue
			}
			score := po.ge * (target - pl.served[s]) / po.x * weight
			if score > bestScore {
				bestS, bestO, bestC, bestCost, bestScore = s, o, c, cost, score
			}
		}
	}
	return bestS, bestO, bestC, bestCost
}

// cover returns the fewest decode GPUs of tier s whose capacity is at
// least target req/s: n1 instances of one degree plus n2 of another (or
// the same), over every pair. Ties keep the first pair found, lower
// degrees first.
func (pl *Planner) cover(s int, target float64) cover {
	best := cover{o1: -1, o2: -1}
	if target <= 0 {
		return best
	}
	best.gpus = math.MaxInt
	opts := pl.dec[s]
	for a, oa := range opts {
		// All of degree a, rounded up.
		n := ceilDiv(target, oa.x)
		if g := n * oa.tp; g < best.gpus {
			best = cover{o1: a, o2: -1, n1: n, gpus: g, x: float64(n) * oa.x}
		}
		// As many of degree a as fit below target, the rest of degree b.
		n = int(target / oa.x)
		rest := target - float64(n)*oa.x
		if n == 0 || rest <= 1e-9*target {
			continue
		}
		for b, ob := range opts {
			if b == a {
				continue
			}
			m := ceilDiv(rest, ob.x)
			if g := n*oa.tp + m*ob.tp; g < best.gpus {
				best = cover{o1: a, o2: b, n1: n, n2: m, gpus: g, x: float64(n)*oa.x + float64(m)*ob.x}
			}
		}
	}
	return best
}

// ceilDiv is ⌈a/b⌉ for positive a and b, forgiving float error of one
// part in 10⁹ so that 3·x/x is 3, not 4.
func ceilDiv(a, b float64) int {
	return int(math.Ceil(a/b - 1e-9))
}

// layout turns the greedy's counts into a Plan with GPUs assigned.
func (pl *Planner) layout(rates []float64) *Plan {
	n := pl.tiers.Len()
	plan := &Plan{GPUs: pl.gpus, Tiers: make([]TierPlan, n)}
	var insts []Instance
	for s := range n {
		tp := &plan.Tiers[s]
		tp.Rate = rates[s]
		tp.Feasible = len(pl.pre[s]) > 0 && len(pl.dec[s]) > 0
		for o, k := range pl.count[s] {
			if k == 0 {
				continue
			}
			po := pl.pre[s][o]
			tp.Groups = append(tp.Groups, Group{Role: Prefill, TP: po.tp, Count: k})
			tp.GPUs += k * po.tp
			for range k {
				insts = append(insts, Instance{Tier: s, Role: Prefill, TP: po.tp, Capacity: pl.inFlight[s][o], Batch: po.batch})
			}
		}
		c := pl.decode[s]
		var dg []Group
		for _, part := range [2]struct{ o, k int }{{c.o1, c.n1}, {c.o2, c.n2}} {
			if part.o < 0 || part.k == 0 {
				continue
			}
			do := pl.dec[s][part.o]
			dg = append(dg, Group{Role: Decode, TP: do.tp, Count: part.k})
			for range part.k {
				insts = append(insts, Instance{Tier: s, Role: Decode, TP: do.tp, Batch: do.batch})
			}
		}
		slices.SortFunc(dg, func(a, b Group) int { return a.TP - b.TP })
		tp.Groups = append(tp.Groups, dg...)
		tp.GPUs += c.gpus
		tp.Capacity = min(pl.p[s], c.x)
		tp.Served = min(tp.Capacity, rates[s])
	}
	// Aligned blocks: descending degree, then tier, then prefill before
	// decode, so every offset is a sum of degrees no smaller than the
	// current one. The sort is stable and its input ordered, so the
	// layout is deterministic.
	slices.SortStableFunc(insts, func(a, b Instance) int { return b.TP - a.TP })
	next := 0
	for i := range insts {
		insts[i].FirstGPU = next
		next += insts[i].TP
	}
	spare := pl.gpus - next
	for g := next; g < pl.gpus; g++ {
		insts = append(insts, Instance{Tier: -1, Role: Spare, TP: 1, FirstGPU: g, Background: true})
	}
	if spare == 0 {
		for i := range insts {
			insts[i].Background = insts[i].Role == Prefill
		}
	}
	plan.Instances = insts
	return plan
}
