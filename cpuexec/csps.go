package cpuexec

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// CSPS runs steps of a model under CSPS's sequence-sharded layout (paper
// 002): N ranks, each holding the full weights (R1) and the keys
// and values of every KV head for the tokens of its own blocks.
//
// The KV layout is per-rank block tables in one global block-id space:
// block b lives on rank b / PerRank (in its local block b mod PerRank), so
// a sequence's block table itself says which rank holds which of its
// tokens. A long prompt whose consecutive blocks sit on consecutive ranks
// is sharded along the sequence (one SPT per rank); a short one whose
// blocks all sit on one rank lives there whole and runs there (DP-like),
// beside the shards of long ones. Any block table is computed correctly;
// the scheduler's sequence-sharded allocation (KVShards, which the engine
// passes to kvcache.ManagerConfig.Shards) hands out tables of that shape.
//
// Each step, every token is computed (embedding, QKV, O projection, MLP,
// logits) by the rank holding its block, which also stores its K and V.
// Attention, per layer:
//
//   - A piece (a sequence's prefill chunk in the step) whose tokens lie on
//     more than one rank runs SP-NTP (R2–R5): the first all-to-all sends
//     each rank the q, k and v of its head chunk (query heads split as
//     evenly as possible, parallel.Even, so N need not divide them; each
//     chunk carries the KV heads its query heads read, so KV heads are
//     replicated when N exceeds them, G9) for every token of the piece;
//     the rank attends causally with its heads over the piece's own keys,
//     and the second all-to-all brings each token's heads back to its
//     owner.
//   - Every other token (a decode token, or a prefill chunk that lies on
//     one rank) is attended by its owner for all heads.
//   - Keys already in the cache (earlier chunks and earlier tokens) stay
//     where they are: the query moves to them (R33–R36). The computing
//     rank attends over the keys it holds itself; for each other rank
//     holding keys of the range it sends the query rows there, that rank
//     returns its partial (output, log-sum-exp) over its own keys, and
//     the partials merge as O = Σ_g exp(LSE_g − LSE)·O_g (attention.go's
//     LSE). So a later chunk of a prompt sees its earlier chunks without
//     moving any KV, and a decode step moves only q out and (O, LSE) back.
//
// Exactness (inferred design, stated): a prompt prefilled in one chunk
// attends over its own keys in tiles aligned at absolute multiples of the
// block size, in the single-rank kernel's order, so its attention is the
// single rank's to the bit; the logits still differ in the last bits
// because tensor.MatMulW's rounding depends on how many rows it gets (a
// rank multiplies its SPT's rows only). Merged partials (later chunks,
// decode over several shards) differ from the single rank's one online
// softmax by float32 rounding. Tests hold logits to 1e-4 of the largest
// logit and greedy tokens to equality. With a 16-bit KV cache the keys of
// the step's own SP pieces are attended in float32 as the all-to-all
// brings them, those in the cache as stored.
//
// A piece configured SP-TP (CSPSOptions.Configure) runs SP-TP instead
// (csps_sptp.go, R7–R10): an all-gather of its normed hidden states, each
// rank's head chunk of W_Q/W_K/W_V and W_O, a reduce-scatter back along
// the sequence; the KV storage and the queries moved to cached keys are
// as above. Micro-partition pipelining (CSPSOptions.MicroPartitions)
// acts on either; CSA's multi-level sparse attention (CSPSOptions.CSA,
// csa.go) on SP-NTP pieces.
type CSPS struct {
	e       *Executor // DP = N: rank r's full weights and its KV pool of PerRank blocks
	n       int
	perRank int
	p       parallel.Placement
	sptMax  int

	steps   int
	stepsMu sync.Mutex
	plan    cspsPlan
	workers []*cspsWorker

	csaTrace func(CSATrace) // tests: each rank's CSA rows of each layer
	tpCopied atomic.Int64   // SPTPCopyBytes
}

// CSPSOptions configure a CSPS executor; the fields shared with Options
// mean the same there.
type CSPSOptions struct {
	Ranks     int // N: the ranks a long prompt's SPTs are spread over
	BlockSize int // default 16
	PerRank   int // KV blocks per rank; default one full context
	// SPTMax is the longest sequence partition one rank takes, in tokens
	// (R12: the SPT that fills a rank's KV cache); the scheduler spreads
	// a prompt over ⌈len/SPTMax⌉ ranks (KVShards). Default PerRank blocks.
	SPTMax int
	// CSA is the multi-level sparse attention of prompts prefilled over
	// several ranks; the zero value is off (exact attention).
	CSA CSA
	// Configure, when set, configures each prompt piece that lies on
	// several ranks (CSPSPrompt: SP-NTP or SP-TP, CSA or not): it is
	// called with the sequence's length through the step's chunk (the
	// whole prompt when it runs in one chunk). Nil runs SP-NTP, with CSA
	// at CSA.Drop on every prompt CSA can run on.
	Configure func(promptLen int) CSPSPrompt
	// MicroPartitions splits a step's SP-NTP attention into that many
	// micro-partitions along the sequence, overlapping each one's
	// all-to-alls with its neighbours' attention (R27–R30), or a step's
	// SP-TP attention, overlapping each one's all-gather and
	// reduce-scatter with its neighbours' projections and attention (R31;
	// at most one per tensor.RowIndependentMin tokens); 0 or 1 runs it
	// whole. Steps that also move queries to cached keys (later chunks,
	// decodes of sharded sequences) or mix SP-NTP and SP-TP run whole.
	MicroPartitions int
	Options         Options
}

// CSPSPrompt is one prompt's configuration (CSPSOptions.Configure).
type CSPSPrompt struct {
	// SPTP prefills the prompt's pieces that lie on several ranks with
	// SP-TP (all-gather + reduce-scatter, csps_sptp.go) instead of SP-NTP.
	SPTP bool
	// CSA runs CSA's multi-level sparse attention at level-2 drop ratio
	// Drop (in [0, 1); the levels stay CSA.Levels), on SP-NTP prompts
	// prefilled in one chunk only; SP-TP prompts run dense.
	CSA  bool
	Drop float64
}

// CSPSPlacement is the placement a CSPS executor over n ranks runs
// under: SP over the n ranks, named csps(ranks=n).
func CSPSPlacement(n int) parallel.Placement {
	p := parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: n, TP: 1})
	p.Name = fmt.Sprintf("csps(ranks=%d)", n)
	return p
}

// NewCSPS builds a CSPS executor over opts.Ranks ranks.
func NewCSPS(cfg *model.Config, w *model.Weights, opts CSPSOptions) (*CSPS, error) {
	if opts.Ranks < 1 {
		return nil, fmt.Errorf("cpuexec: csps needs at least one rank, got %d", opts.Ranks)
	}
	o := opts.Options
	o.Plan, o.Placements = parallel.Plan{DP: opts.Ranks, PP: 1, SP: 1, TP: 1}, nil
	o.BlockSize, o.NumBlocks = opts.BlockSize, opts.PerRank
	o.MicroBatches, o.HostBlocks, o.WeightsFromHost = 1, 0, false
	e, err := NewExecutor(cfg, w, o)
	if err != nil {
		return nil, err
	}
	if opts.SPTMax < 0 {
		return nil, fmt.Errorf("cpuexec: csps: negative SPT length %d", opts.SPTMax)
	}
	if err := opts.CSA.validate(); err != nil {
		return nil, err
	}
	c := &CSPS{e: e, n: opts.Ranks, perRank: e.kv.NumBlocks, p: CSPSPlacement(opts.Ranks), sptMax: opts.SPTMax}
	c.plan.csa, c.plan.micro, c.plan.configure = opts.CSA, opts.MicroPartitions, opts.Configure
	if c.sptMax == 0 {
		c.sptMax = c.perRank * e.kv.BlockSize
	}
	for range opts.Ranks {
		c.workers = append(c.workers, &cspsWorker{tp: spTP{copied: &c.tpCopied}})
	}
	return c, nil
}

// Config is the model's config.
func (c *CSPS) Config() *model.Config { return c.e.cfg }

// Placement is the one placement Step runs under, CSPSPlacement(N).
func (c *CSPS) Placement() parallel.Placement { return c.p }

// Placements returns Placement.
func (c *CSPS) Placements() []parallel.Placement { return []parallel.Placement{c.p} }

// Ranks is N.
func (c *CSPS) Ranks() int { return c.n }

// PerRank is the number of KV blocks each rank holds.
func (c *CSPS) PerRank() int { return c.perRank }

// KVLayout is the global block-id space the scheduler allocates in: N ×
// PerRank blocks, block b on rank b / PerRank.
func (c *CSPS) KVLayout() kvcache.Layout {
	kv := c.e.kv
	kv.NumBlocks = c.n * c.perRank
	return kv
}

// KVShards tells the scheduler to allocate along the sequence: N shards
// of PerRank blocks, ⌈SPTMax/BlockSize⌉ blocks of a sequence per rank
// (engine.SequenceSharded).
func (c *CSPS) KVShards() (shards, sptBlocks int) {
	bs := c.e.kv.BlockSize
	return c.n, max(1, (c.sptMax+bs-1)/bs)
}

// SPTMax is the longest sequence partition one rank takes, in tokens.
func (c *CSPS) SPTMax() int { return c.sptMax }

// Owner is the rank holding global block b.
func (c *CSPS) Owner(b int) int { return b / c.perRank }

// PlanSteps counts the steps run, under the placement's name.
func (c *CSPS) PlanSteps() map[string]int {
	c.stepsMu.Lock()
	defer c.stepsMu.Unlock()
	if c.steps == 0 {
		return map[string]int{}
	}
	return maps.Clone(map[string]int{c.p.Name: c.steps})
}

// CommStats returns the bytes every collective moved so far.
func (c *CSPS) CommStats() comm.Stats { return c.e.CommStats() }

// CommTime is the time each rank has spent in collectives.
func (c *CSPS) CommTime() []time.Duration { return c.e.CommTime() }

// KVBytes is the KV cache memory held by each rank.
func (c *CSPS) KVBytes() []int64 { return c.e.KVBytes() }

// Step runs one batch (block ids in the global space of KVLayout) and
// returns the requested logits, [NumLogits, vocab] in batch order, valid
// until the next call. p must be Placement.
func (c *CSPS) Step(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]float32, error) {
	if p.Name != c.p.Name {
		return nil, fmt.Errorf("cpuexec: csps executor runs only under %s, asked for %s", c.p, p)
	}
	e, cfg := c.e, c.e.cfg
	if err := b.Validate(cfg.Vocab, cfg.MaxPositions, e.kv.BlockSize, c.n*c.perRank, 1); err != nil {
		return nil, err
	}
	c.plan.build(b, cfg, c.n, c.perRank, e.kv.BlockSize)
	if n := b.NumLogits() * cfg.Vocab; cap(e.out) < n {
		e.out = make([]float32, n)
	}
	e.out = e.out[:b.NumLogits()*cfg.Vocab]
	err := e.onRanks(ctx, func(ctx context.Context, rk *rank) error {
		w := c.workers[rk.id]
		w.rk, w.p, w.trace = rk, &c.plan, c.csaTrace
		defer func() { w.rk, w.p = nil, nil }()
		return w.run(ctx, rk, e.held[e.order[0]].shards[rk.id])
	})
	if err != nil {
		return nil, fmt.Errorf("cpuexec: csps step: %w", err)
	}
	c.stepsMu.Lock()
	c.steps++
	c.stepsMu.Unlock()
	return e.out, nil
}

// cspsTok is one token of a CSPS step.
type cspsTok struct {
	seq    int  // sequence index in the batch
	pos    int  // position
	owner  int  // rank holding its block: computes its QKV, O projection, MLP, logits
	row    int  // row on the owner
	sp     bool // its piece lies on several ranks: attended head-sharded (SP-NTP after the all-to-all, or SP-TP)
	tp     bool // its piece runs SP-TP (sp too): all-gathered, attended head-sharded, reduce-scattered back
	csa    bool // its piece runs CSA's multi-level sparse attention instead (csa.go)
	csaOrd int  // index among the step's CSA tokens, batch order (csa only)
	spOrd  int  // index among the step's SP tokens, batch order (sp only)
	// Key ranges: cached keys [from, mid) reached by moving the query,
	// in-step keys [mid, to) of an SP piece from the all-to-all; mid = to
	// for the others, whose own keys are in their owner's cache.
	from, mid, to int
}

// cspsReq asks a holder for the partial over its keys of query heads
// [qlo, qhi) of token tok.
type cspsReq struct{ tok, qlo, qhi int }

// cspsPlan is one step's schedule, the same on every rank: who computes
// what and what moves where. Built once per step, read by every rank.
type cspsPlan struct {
	n, perRank, bs int
	toks           []cspsTok
	micros         []micro          // per rank: its tokens as pieces with local block tables
	own            [][]int          // per rank: plan index of each of its rows
	tables         [][][]int        // [rank][seq] local block table, -1 where another rank holds the block
	spByOwner      [][]int          // per rank: its SP-NTP tokens, batch order
	tpByOwner      [][]int          // per rank: its SP-TP tokens, batch order
	tpOwnAll       []bool           // per rank: every row it owns runs SP-TP (it skips its own q and O projection)
	anyTP          bool             // some SP token runs SP-TP
	anyNTP         bool             // some SP token runs SP-NTP
	spToks         []int            // every SP token, batch order
	seqFirstSP     []int            // per sequence: spOrd of its piece's first token, -1 if not SP
	chunks         []parallel.Heads // per rank: the query heads (and KV heads they read) it attends for SP tokens
	reqs           [][][]cspsReq    // [computing rank][holder rank]
	anyReq         bool
	micro          int // SP-NTP or SP-TP micro-partitions (CSPSOptions.MicroPartitions)
	csa            CSA // the executor's sparse attention setting
	configure      func(int) CSPSPrompt
	drops          []float64 // per sequence: its CSA drop ratio
	csaToks        []int     // every CSA token, batch order
	csaByOwner     [][]int   // per rank: its CSA tokens, batch order
	spanOwners     []int     // scratch: owners seen in a key range
}

// build fills the plan for batch b.
func (p *cspsPlan) build(b *forward.Batch, cfg *model.Config, n, perRank, bs int) {
	p.n, p.perRank, p.bs = n, perRank, bs
	p.toks = p.toks[:0]
	p.spToks = p.spToks[:0]
	p.csaToks = p.csaToks[:0]
	resize(&p.csaByOwner, n)
	p.anyReq = false
	resize(&p.micros, n)
	resize(&p.tables, n)
	resize(&p.spByOwner, n)
	resize(&p.own, n)
	resize(&p.reqs, n)
	p.chunks = p.chunks[:0]
	group := cfg.Heads / cfg.KVHeads
	for r := range n {
		p.micros[r].seqs, p.micros[r].rows = p.micros[r].seqs[:0], p.micros[r].rows[:0]
		resize(&p.tables[r], len(b.Seqs))
		p.spByOwner[r] = p.spByOwner[r][:0]
		p.csaByOwner[r] = p.csaByOwner[r][:0]
		p.own[r] = p.own[r][:0]
		resize(&p.reqs[r], n)
		for g := range n {
			p.reqs[r][g] = p.reqs[r][g][:0]
		}
		q := parallel.Even(cfg.Heads, n, r)
		h := parallel.Heads{QLo: q.Lo, QHi: q.Hi}
		if q.Len() > 0 {
			h.KVLo, h.KVHi = q.Lo/group, (q.Hi-1)/group+1
		}
		p.chunks = append(p.chunks, h)
	}
	resizeInts(&p.seqFirstSP, len(b.Seqs))
	resize(&p.drops, len(b.Seqs))
	p.anyNTP = false
	rows := make([]int, n) // next local row per rank
	outRow := 0
	for i, s := range b.Seqs {
		for r := range n {
			t := p.tables[r][i][:0]
			for _, blk := range s.Blocks {
				if blk/perRank == r {
					t = append(t, blk%perRank)
				} else {
					t = append(t, -1)
				}
			}
			p.tables[r][i] = t
		}
		first := len(s.Tokens) - s.NumLogits
		sp := false
		for j := range s.Tokens {
			if s.Blocks[(s.Pos+j)/bs]/perRank != s.Blocks[s.Pos/bs]/perRank {
				sp = true
				break
			}
		}
		pc := CSPSPrompt{CSA: true, Drop: p.csa.Drop}
		if sp && p.configure != nil {
			pc = p.configure(s.Pos + len(s.Tokens))
		}
		// CSA for a whole SP-NTP prompt in one chunk: from position 0 to
		// the token whose logits the engine samples.
		csa := sp && !pc.SPTP && pc.CSA && pc.Drop >= 0 && pc.Drop < 1 && p.csa.Levels > 1 && s.Pos == 0 && s.NumLogits > 0 &&
			cfg.SlidingWindow == 0 && ownersRise(s, bs, perRank)
		p.drops[i] = pc.Drop
		sp = sp && !csa
		tp := sp && pc.SPTP
		p.anyNTP = p.anyNTP || (sp && !tp)
		p.seqFirstSP[i] = -1
		if sp {
			p.seqFirstSP[i] = len(p.spToks)
		}
		for a := 0; a < len(s.Tokens); {
			owner := s.Blocks[(s.Pos+a)/bs] / perRank
			e := a + 1
			for e < len(s.Tokens) && s.Blocks[(s.Pos+e)/bs]/perRank == owner {
				e++
			}
			piece := forward.SeqBatch{Tokens: s.Tokens[a:e], Pos: s.Pos + a, Blocks: p.tables[owner][i]}
			lo := max(a, first)
			if e > lo {
				piece.NumLogits = e - lo
			}
			m := &p.micros[owner]
			m.seqs = append(m.seqs, piece)
			m.rows = append(m.rows, outRow+max(0, lo-first))
			for j := a; j < e; j++ {
				pos := s.Pos + j
				from := 0
				if cfg.SlidingWindow > 0 && pos+1 > cfg.SlidingWindow {
					from = pos + 1 - cfg.SlidingWindow
				}
				t := cspsTok{seq: i, pos: pos, owner: owner, row: rows[owner], from: from, mid: pos + 1, to: pos + 1}
				rows[owner]++
				p.own[owner] = append(p.own[owner], len(p.toks))
				if csa {
					t.csa, t.csaOrd, t.mid = true, len(p.csaToks), from // no cached keys: the prompt's first chunk
					p.csaToks = append(p.csaToks, len(p.toks))
					p.csaByOwner[owner] = append(p.csaByOwner[owner], len(p.toks))
				}
				if sp {
					t.sp, t.tp, t.spOrd, t.mid = true, tp, len(p.spToks), max(from, s.Pos)
					p.spToks = append(p.spToks, len(p.toks))
					if !tp {
						p.spByOwner[owner] = append(p.spByOwner[owner], len(p.toks))
					}
				}
				p.toks = append(p.toks, t)
			}
			a = e
		}
		outRow += s.NumLogits
	}
	p.buildTP()
	// Queries that move to cached keys held elsewhere.
	for ti, t := range p.toks {
		if t.mid <= t.from {
			continue
		}
		blocks := b.Seqs[t.seq].Blocks
		p.spanOwners = p.spanOwners[:0]
		for bi := t.from / bs; bi <= (t.mid-1)/bs; bi++ {
			g := blocks[bi] / perRank
			if !containsInt(p.spanOwners, g) {
				p.spanOwners = append(p.spanOwners, g)
			}
		}
		for c := range n {
			qlo, qhi := 0, cfg.Heads
			if t.sp {
				qlo, qhi = p.chunks[c].QLo, p.chunks[c].QHi
			} else if c != t.owner {
				continue
			}
			if qhi == qlo {
				continue
			}
			for _, g := range p.spanOwners {
				if g != c {
					p.reqs[c][g] = append(p.reqs[c][g], cspsReq{tok: ti, qlo: qlo, qhi: qhi})
					p.anyReq = true
				}
			}
		}
	}
}

// holds reports whether rank r holds a block of sequence seq's keys in
// [from, to).
func (p *cspsPlan) holds(r, seq, from, to int) bool {
	if to <= from {
		return false
	}
	t := p.tables[r][seq]
	for bi := from / p.bs; bi <= (to-1)/p.bs; bi++ {
		if t[bi] >= 0 {
			return true
		}
	}
	return false
}

// ownersRise reports whether the ranks holding s's tokens never go down
// along the sequence, so each rank's part is one contiguous SPT.
func ownersRise(s forward.SeqBatch, bs, perRank int) bool {
	end := s.Pos + len(s.Tokens)
	for bi := s.Pos / bs; bi < (end-1)/bs; bi++ {
		if s.Blocks[bi+1]/perRank < s.Blocks[bi]/perRank {
			return false
		}
	}
	return true
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func resize[T any](s *[]T, n int) {
	if cap(*s) < n {
		*s = append((*s)[:cap(*s)], make([]T, n-cap(*s))...)
	}
	*s = (*s)[:n]
}

func resizeInts(s *[]int, n int) { resize(s, n) }
