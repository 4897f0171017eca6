package sim

import (
	"context"
	"fmt"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// Seq is one sequence's share of a step, as forward.SeqBatch without the
// token ids: a prefill chunk (New > 1) or a decode (New = 1) on top of
// Context tokens already in the KV cache.
type Seq struct {
	Context int // tokens of the sequence already in the KV cache (forward.SeqBatch.Pos)
	New     int // tokens run this step
	Logits  int // trailing tokens of New that want logits, 0 … New
	Replica int // data-parallel replica holding the sequence's KV
}

// StepShape is one step: the sequences' new tokens flattened into one
// batch per replica, exactly as the engine splits it.
type StepShape struct {
	Seqs []Seq
	// MicroBatches is the number of pipeline micro-batches each replica's
	// tokens are cut into (cpuexec.Options.MicroBatches); 0 means
	// the plan's PP, the engine's default.
	MicroBatches int
}

// Component is one part of a step's time.
type Component uint8

const (
	CompEmbed       Component = iota // embedding lookup of the rank's vocabulary slice
	CompNorm                         // RMSNorms, RoPE (and q/k norms), SiLU·mul, residual adds, SP packing
	CompQuant                        // FP8 activation quantization before W8A8 GEMMs
	CompQKV                          // fused q/k/v projection of the rank's heads
	CompCache                        // KV cache writes
	CompAttnPrefill                  // attention of prefill chunks
	CompAttnDecode                   // attention of decodes
	CompOut                          // o projection
	CompMLPUp                        // fused gate/up projection of the rank's intermediate slice
	CompMLPDown                      // down projection
	CompLMHead                       // final norm, the LM head's vocabulary slice and bringing its logits to the host (Efficiency.LogitsBytesPerS)
	CompAllReduce                    // TP all-reduces: embedding and two per layer
	CompAllToAll                     // SP (Ulysses) all-to-alls: two per layer
	CompSendRecv                     // pipeline sends to the next stage
	CompAllGather                    // TP all-gather of the logits slices
	CompOverhead                     // the engine's host time per step
	NumComponents
)

var componentNames = [NumComponents]string{
	"embed", "norm", "quant", "qkv", "cache", "attn_prefill", "attn_decode", "out", "mlp_up", "mlp_down",
	"lm_head", "all_reduce", "all_to_all", "send_recv", "all_gather", "overhead",
}

// String is the component's snake_case name.
func (c Component) String() string {
	if c < NumComponents {
		return componentNames[c]
	}
	return fmt.Sprintf("component(%d)", uint8(c))
}

// NumCommKinds is the number of comm.Kind values, the length of
// Breakdown.CommBytes.
const NumCommKinds = int(comm.NumKinds)

// Cost is one component's share of a rank's step, seconds.
type Cost struct {
	Compute float64 // at the compute roof, summed over its kernels
	Memory  float64 // at the memory roof, summed over its kernels
	Comm    float64 // on the link (collectives)
	Time    float64 // what it adds to the step: Σ max(compute, memory) + kernel latency, or the collectives' time
}

// Breakdown is one rank's step.
type Breakdown struct {
	Parts                        [NumComponents]Cost
	Compute, Memory, Comm, Total float64 // sums over Parts; Total is Σ Time, the rank's busy time plus the overhead
	// CommBytes is what package comm would count for this rank: calls,
	// bytes sent and bytes received, by kind (index by comm.Kind). It
	// equals the CPU executor's CommStats for the same step and plan.
	CommBytes [NumCommKinds]comm.Counter
}

func (b *Breakdown) add(c Component, k kernel, latency float64, times int) {
	if times == 0 {
		return
	}
	f := float64(times)
	p := &b.Parts[c]
	p.Compute += k.compute * f
	p.Memory += k.memory * f
	t := k.time(latency) * f
	p.Time += t
	b.Compute += k.compute * f
	b.Memory += k.memory * f
	b.Total += t
}

func (b *Breakdown) addComm(c Component, kind comm.Kind, sent, recv int64, t float64, times int) {
	if times == 0 {
		return
	}
	f := float64(times)
	p := &b.Parts[c]
	p.Comm += t * f
	p.Time += t * f
	b.Comm += t * f
	b.Total += t * f
	n := int64(times)
	cnt := &b.CommBytes[kind]
	cnt.Calls += n
	cnt.SentBytes += sent * n
	cnt.RecvBytes += recv * n
}

// rankShape is what one rank computes under the layout, from the same
// plan functions the engine's shards use.
type rankShape struct {
	coord      parallel.Coord
	layers     int
	qs, ks     int // slice q and KV widths (elements): the q/k/v outputs, the o input
	qc, kc     int // chunk q and KV widths: the attention
	hq, hkv    int // chunk query and KV heads
	inter      int // intermediate slice
	vocab      int // vocabulary slice
	first      bool
	last       bool
	stageIndex int // index of (dp, pp) in LayoutCost.stages
	twin       int // a lower rank of the stage whose every cost equals this rank's, or the rank itself
}

// microShape is one micro-batch of one replica.
type microShape struct {
	tokens          int
	continues       bool // holds a sequence that had KV before the step (a decode or a later chunk)
	nl              int  // rows per SP rank, padding included
	prefill, decode AttentionWork
	logits          []int // logits rows by SP index
}

// LayoutCost is the cost model bound to a model and a layout: every
// rank's shard shapes are computed once, so a step costs a walk over its
// sequences and a closed-form sum per rank, without allocating. It keeps
// scratch buffers: it is not safe for concurrent use (use one per
// goroutine).
type LayoutCost struct {
	m      *CostModel
	cfg    *model.Config
	layout parallel.Placement
	ranks  []rankShape
	stages [][]int // ranks by (dp, pp): stages[dp·PP + pp]
	vocabs []int   // vocabulary slice length by TP index
	elem   int     // wire bytes per activation element

	eq, counts []int
	micros     []microShape
	bounds     []int
	logitBuf   []int
	ops        costOps
	finish     []float64 // by stage: when it finished its latest micro-batch
	busy       []float64 // by rank
	last       []float64 // by rank: duration of the current micro-batch
	pipe       pipeline
}

// pipeline is what a layout's stages carry from one step into the next
// when steps overlap (SetOverlap). vLLM runs a PP deployment as PP virtual
// engines whose batches follow each other through the stages, so a stage
// starts its share of the next batch as soon as it is done with the
// current one, and only a batch's own sequences wait for its tokens. The
// engine here schedules one batch per step; with overlap, a step ends (and
// the next is scheduled) when its last micro-batch would leave the
// pipeline if nothing else were in it, while the stages still busy with it
// push the next step's micro-batches back, and a micro-batch that
// continues sequences waits for the same micro-batch of the step before to
// leave the last stage and be sampled (the engine's overhead). In steady state a step of m ≥ PP micro-batches
// then takes m stage times instead of m + PP − 1. Tokens are stamped at
// the step's end, up to one pipeline drain before they leave the last
// stage.
type pipeline struct {
	on    bool
	stage []float64   // by stage (dp·PP + pp): how long after the step's end it is still busy
	exit  [][]float64 // by replica and micro-batch: how long after the step's end its tokens leave the last stage
}

// SetOverlap makes consecutive steps overlap in the pipeline, as vLLM's
// pipeline-parallel virtual engines do (see pipeline); off, every step
// fills and drains the pipeline, as Gearbox's executors do. Turning it on
// or off forgets what the stages carry.
func (lc *LayoutCost) SetOverlap(on bool) {
	p := lc.layout.Plan
	lc.pipe = pipeline{on: on}
	if on {
		lc.pipe.stage = make([]float64, p.DP*p.PP)
		lc.pipe.exit = make([][]float64, p.DP)
	}
}

// Idle tells an overlapping layout that gap seconds passed between its
// previous step's end and the next step's start.
func (lc *LayoutCost) Idle(gap float64) {
	if !lc.pipe.on || gap <= 0 {
		return
	}
	for i := range lc.pipe.stage {
		lc.pipe.stage[i] = max(0, lc.pipe.stage[i]-gap)
	}
	for _, ex := range lc.pipe.exit {
		for j := range ex {
			ex[j] = max(0, ex[j]-gap)
		}
	}
}

// Drain forgets what an overlapping layout's stages carry: the pipeline
// emptied (the engine switched to another layout).
func (lc *LayoutCost) Drain() {
	if lc.pipe.on {
		lc.SetOverlap(true)
	}
}

// Layout binds the cost model to cfg under layout l (a plan's Standard
// placement or a base plan's ShiftPlacement). The plan must fit the model and
// the node. cfg must not change afterwards.
func (c *CostModel) Layout(cfg *model.Config, l parallel.Placement) (*LayoutCost, error) {
	p := l.Plan
	if err := p.Validate(cfg); err != nil {
		return nil, err
	}
	if len(l.Coords) != p.Ranks() {
		return nil, fmt.Errorf("sim: layout %s has %d ranks, its plan %d", l, len(l.Coords), p.Ranks())
	}
	if p.Ranks() > c.Node.Count {
		return nil, fmt.Errorf("sim: plan %s needs %d GPUs, node %s has %d", p, p.Ranks(), c.Node, c.Node.Count)
	}
	lc := &LayoutCost{
		m: c, cfg: cfg, layout: l, elem: int(c.actBytes),
		stages: make([][]int, p.DP*p.PP),
		eq:     make([]int, p.SP), counts: make([]int, p.TP),
		finish: make([]float64, p.PP), busy: make([]float64, p.Ranks()), last: make([]float64, p.Ranks()),
	}
	d := cfg.HeadDim
	for t := 0; t < p.TP; t++ {
		lc.vocabs = append(lc.vocabs, parallel.Even(cfg.Vocab, p.TP, t).Len())
	}
	for r, co := range l.Coords {
		slice := parallel.SliceHeads(cfg, co.TP, p.SP, p.TP)
		chunk := parallel.ChunkHeads(cfg, p.HeadChunk(co), p.HeadShards())
		s := rankShape{
			coord:  co,
			layers: p.Stage(co.PP, cfg.Layers).Len(),
			qs:     (slice.QHi - slice.QLo) * d, ks: (slice.KVHi - slice.KVLo) * d,
			qc: (chunk.QHi - chunk.QLo) * d, kc: (chunk.KVHi - chunk.KVLo) * d,
			hq: chunk.QHi - chunk.QLo, hkv: chunk.KVHi - chunk.KVLo,
			inter:      parallel.Even(cfg.Intermediate, p.TP, co.TP).Len(),
			vocab:      lc.vocabs[co.TP],
			first:      co.PP == 0,
			last:       co.PP == p.PP-1,
			stageIndex: co.DP*p.PP + co.PP,
		}
		// TP members with the same shard shapes have equal costs when the
		// collectives' per-member byte counts cannot differ: ring chunks of
		// n·hidden elements and vocabulary slices are then equal.
		s.twin = r
		if cfg.Hidden%p.TP == 0 && cfg.Vocab%p.TP == 0 {
			for _, o := range lc.stages[s.stageIndex] {
				if t := lc.ranks[o]; t.twin == o && t.coord.SP == co.SP {
					t.coord.TP, t.twin = co.TP, r
					if t == s {
						s.twin = o
						break
					}
				}
			}
		}
		lc.ranks = append(lc.ranks, s)
		lc.stages[s.stageIndex] = append(lc.stages[s.stageIndex], r)
	}
	return lc, nil
}

// Layout is the layout the costs are for.
func (lc *LayoutCost) Layout() parallel.Placement { return lc.layout }

// CostModel is the cost model the layout is bound to.
func (lc *LayoutCost) CostModel() *CostModel { return lc.m }

// prepare cuts replica d's tokens into micro-batches as the engine does
// (token i of T goes to micro-batch ⌊i·m/T⌋, m = min(MicroBatches, T)) and
// fills lc.micros; it returns their number, 0 when the replica is idle.
func (lc *LayoutCost) prepare(b *StepShape, d int) int {
	p := lc.layout.Plan
	total := 0
	for i := range b.Seqs {
		if s := &b.Seqs[i]; s.Replica == d {
			total += s.New
		}
	}
	if total == 0 {
		return 0
	}
	micro := b.MicroBatches
	if micro <= 0 {
		micro = p.PP
	}
	m := min(micro, total)
	if cap(lc.micros) < m {
		lc.micros = make([]microShape, m)
	}
	lc.micros = lc.micros[:m]
	if cap(lc.logitBuf) < m*p.SP {
		lc.logitBuf = make([]int, m*p.SP)
	}
	lc.logitBuf = lc.logitBuf[:m*p.SP]
	clear(lc.logitBuf)
	if cap(lc.bounds) < m+1 {
		lc.bounds = make([]int, m+1)
	}
	bounds := lc.bounds[:m+1] // bounds[j] is micro-batch j's first token: ⌈j·T/m⌉
	for j := range bounds {
		bounds[j] = (j*total + m - 1) / m
	}
	for j := range lc.micros {
		tokens := bounds[j+1] - bounds[j]
		lc.micros[j] = microShape{tokens: tokens, nl: (tokens + p.SP - 1) / p.SP, logits: lc.logitBuf[j*p.SP : (j+1)*p.SP]}
	}
	window := lc.cfg.SlidingWindow
	pos, j := 0, 0 // flattened token index within the replica, current micro-batch
	for i := range b.Seqs {
		s := &b.Seqs[i]
		if s.Replica != d || s.New <= 0 {
			continue
		}
		end := pos + s.New
		firstLogit := end - s.Logits
		for a := pos; a < end; {
			for bounds[j+1] <= a {
				j++
			}
			ms := &lc.micros[j]
			ms.continues = ms.continues || s.Context > 0
			lo := bounds[j]
			e := min(end, bounds[j+1])
			if e-a == 1 {
				ms.decode = ms.decode.Add(SeqAttention(s.Context+a-pos, 1, window))
			} else {
				ms.prefill = ms.prefill.Add(SeqAttention(s.Context+a-pos, e-a, window))
			}
			if la := max(a, firstLogit); e > la {
				if p.SP == 1 {
					ms.logits[0] += e - la
				} else {
					for sp := range ms.logits {
						if n := min(e, lo+(sp+1)*ms.nl) - max(la, lo+sp*ms.nl); n > 0 {
							ms.logits[sp] += n
						}
					}
				}
			}
			a = e
		}
		pos = end
	}
	return m
}

// noCancel is the context the priced program runs under.
var noCancel = context.Background()

// rankMicro adds rank r's work on one micro-batch to b and returns its
// duration: the rank program (forward.Run) priced op by op (costOps).
func (lc *LayoutCost) rankMicro(r int, ms *microShape, b *Breakdown) float64 {
	start := b.Total
	rs := &lc.ranks[r]
	o := &lc.ops
	*o = costOps{lc: lc, rs: rs, ms: ms, b: *b, times: 1} // b by value, so the caller's stays on its stack
	p := lc.layout.Plan
	T, nl := ms.tokens, ms.nl
	o.n = nl * p.SP
	o.real = max(0, min(nl, T-rs.coord.SP*nl))
	// The program's collectives never fail here: the cost model has no peers to wait for.
	_ = forward.Run(noCancel, o, forward.Shape{
		First: rs.first, Last: rs.last, LayerLo: 0, LayerHi: rs.layers, TP: p.TP, SP: p.SP,
	})
	*b = o.b
	if t := lc.m.launchBound(ms, o.kernels, b.Total-start); t > 0 {
		b.Parts[CompOverhead].Time += t
		b.Total += t
	}
	return b.Total - start
}

// StepTime returns global rank r's share of one step: every micro-batch
// of its replica, plus the engine's per-step overhead. A rank of an idle
// replica does nothing (the engine skips it) and gets only the overhead.
func (lc *LayoutCost) StepTime(r int, b *StepShape) Breakdown {
	var out Breakdown
	if r >= 0 && r < len(lc.ranks) {
		m := lc.prepare(b, lc.ranks[r].coord.DP)
		for j := 0; j < m; j++ {
			lc.rankMicro(r, &lc.micros[j], &out)
		}
	}
	o := lc.m.eff.StepOverhead
	out.Parts[CompOverhead].Time += o // beside any launch-bound host time (rankMicro)
	out.Total += o
	return out
}

// Step is the duration of a whole step.
type Step struct {
	Seconds  float64 // from the step's start until every replica's last stage is done, overhead included
	Overhead float64 // the engine's host time per step, part of Seconds
	Busy     float64 // the busiest rank's kernel and collective time
	Slowest  int     // that rank
}

// Step returns the duration of one step. The ranks of a stage run in
// lockstep (each micro-batch takes the slowest of them, as their
// collectives synchronise them); stages form a pipeline over the
// micro-batches, stage s starting micro-batch j when stage s−1 has sent it
// and stage s has finished micro-batch j−1, which yields the PP bubbles;
// replicas run in parallel and the step ends with the slowest. With
// SetOverlap the pipeline carries over from the step before (see
// pipeline).
func (lc *LayoutCost) Step(b *StepShape) Step {
	p := lc.layout.Plan
	out := Step{Overhead: lc.m.eff.StepOverhead}
	clear(lc.busy)
	pipe := &lc.pipe
	var scratch Breakdown
	for d := 0; d < p.DP; d++ {
		m := lc.prepare(b, d)
		if m == 0 {
			continue
		}
		stages := lc.finish
		clear(stages)
		var exit []float64
		if pipe.on {
			copy(stages, pipe.stage[d*p.PP:(d+1)*p.PP])
			exit = pipe.exit[d]
		}
		drain := 0.0 // the last micro-batch's time in stages after the first
		for j := 0; j < m; j++ {
			prev := 0.0
			if j < len(exit) && lc.micros[j].continues {
				prev = exit[j]
			}
			drain = 0
			for s := 0; s < p.PP; s++ {
				t := 0.0
				for _, r := range lc.stages[d*p.PP+s] {
					if tw := lc.ranks[r].twin; tw != r {
						lc.last[r] = lc.last[tw]
					} else {
						scratch = Breakdown{}
						lc.last[r] = lc.rankMicro(r, &lc.micros[j], &scratch)
					}
					lc.busy[r] += lc.last[r]
					t = max(t, lc.last[r])
				}
				stages[s] = max(stages[s], prev) + t
				prev = stages[s]
				if s > 0 {
					drain += t
				}
			}
			if pipe.on {
				if j == len(exit) {
					exit = append(exit, 0)
				}
				exit[j] = prev + out.Overhead // its tokens are sampled before they feed the next step
			}
		}
		end := stages[p.PP-1]
		if pipe.on {
			end -= drain
			copy(pipe.stage[d*p.PP:], stages)
			pipe.exit[d] = exit[:m]
		}
		out.Seconds = max(out.Seconds, end)
	}
	for r, t := range lc.busy {
		if r == 0 || t > out.Busy {
			out.Busy, out.Slowest = t, r
		}
	}
	out.Seconds += out.Overhead
	// What the stages carry is relative to the step's end; a replica
	// idle this step carries its backlog down by the step's length.
	lc.Idle(out.Seconds)
	return out
}
