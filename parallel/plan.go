package parallel

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gearboxlm/gearbox/model"
)

// Plan is a parallel layout: DP × PP × SP × TP ranks. The zero value is
// invalid; Single is one rank.
type Plan struct {
	DP int // data-parallel replicas, each with its own KV cache
	PP int // pipeline stages (layers split into contiguous ranges)
	SP int // Ulysses sequence-parallel degree
	TP int // tensor-parallel degree
}

// Single is the one-rank plan.
var Single = Plan{DP: 1, PP: 1, SP: 1, TP: 1}

// Parse reads a plan written as "tp=2,sp=4" (any order, missing factors
// are 1; "" and "single" mean one rank).
func Parse(s string) (Plan, error) {
	p := Single
	s = strings.TrimSpace(s)
	if s == "" || s == "single" {
		return p, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Plan{}, fmt.Errorf("plan %q: %q is not factor=N (factors: dp, pp, sp, tp)", s, part)
		}
		key = strings.ToLower(strings.TrimSpace(key))
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || n < 1 {
			return Plan{}, fmt.Errorf("plan %q: %s must be a positive integer, got %q", s, key, val)
		}
		if seen[key] {
			return Plan{}, fmt.Errorf("plan %q: %s given twice", s, key)
		}
		seen[key] = true
		switch key {
		case "dp":
			p.DP = n
		case "pp":
			p.PP = n
		case "sp":
			p.SP = n
		case "tp":
			p.TP = n
		default:
			return Plan{}, fmt.Errorf("plan %q: unknown factor %q (factors: dp, pp, sp, tp)", s, key)
		}
	}
	return p, nil
}

// String writes the plan in Parse's syntax, omitting factors of 1.
func (p Plan) String() string {
	var parts []string
	for _, f := range []struct {
		name string
		n    int
	}{{"dp", p.DP}, {"pp", p.PP}, {"sp", p.SP}, {"tp", p.TP}} {
		if f.n != 1 {
			parts = append(parts, fmt.Sprintf("%s=%d", f.name, f.n))
		}
	}
	if len(parts) == 0 {
		return "single"
	}
	return strings.Join(parts, ",")
}

// Ranks is the number of ranks the plan uses.
func (p Plan) Ranks() int { return p.DP * p.PP * p.SP * p.TP }

// HeadShards is the number of attention-head chunks a layer's heads are
// divided into: SP·TP.
func (p Plan) HeadShards() int { return p.SP * p.TP }

// Validate checks that the plan fits the model: SP·TP divides the heads,
// SP·TP and the KV heads divide one another (KV heads are replicated when
// SP·TP is larger), and there are at least as many layers as pipeline
// stages. The MLP's intermediate columns, the vocabulary and the layers are
// split as evenly as possible, so they need not divide.
func (p Plan) Validate(c *model.Config) error {
	if p.DP < 1 || p.PP < 1 || p.SP < 1 || p.TP < 1 {
		return fmt.Errorf("plan %s: every factor must be at least 1", p)
	}
	n := p.HeadShards()
	if c.Heads%n != 0 {
		return fmt.Errorf("plan %s: sp·tp = %d must divide the %d attention heads", p, n, c.Heads)
	}
	if c.KVHeads%n != 0 && n%c.KVHeads != 0 {
		return fmt.Errorf("plan %s: sp·tp = %d and the %d KV heads must divide one another (KV heads are split or replicated)", p, n, c.KVHeads)
	}
	if p.PP > c.Layers {
		return fmt.Errorf("plan %s: pp = %d exceeds the %d layers", p, p.PP, c.Layers)
	}
	return nil
}

// Coord is a rank's position in a plan.
type Coord struct{ DP, PP, SP, TP int }

// Coord returns global rank r's coordinates. Ranks are numbered
// r = ((dp·PP + pp)·SP + sp)·TP + tp: TP groups are consecutive ranks and
// SP groups stride TP, as in the Shift Parallelism paper.
func (p Plan) Coord(r int) Coord {
	tp := r % p.TP
	r /= p.TP
	sp := r % p.SP
	r /= p.SP
	return Coord{DP: r / p.PP, PP: r % p.PP, SP: sp, TP: tp}
}

// Rank is Coord's inverse.
func (p Plan) Rank(c Coord) int {
	return ((c.DP*p.PP+c.PP)*p.SP+c.SP)*p.TP + c.TP
}

// HeadChunk is the attention-head chunk (of HeadShards) a rank attends to
// after the SP all-to-all: tp·SP + sp. Under plain TP it is tp; under
// plain SP it is sp.
func (p Plan) HeadChunk(c Coord) int { return c.TP*p.SP + c.SP }

// Stage returns the layers [lo, hi) of pipeline stage s, as even as
// possible with earlier stages taking the extra layer.
func (p Plan) Stage(s, layers int) Span { return Even(layers, p.PP, s) }

// ShiftOrder lists the ranks of one (dp, pp) slice of a base plan in the
// order that forms the shift configuration's TP group: tp-major, sp-minor
// (for sp=3, tp=2: 0, 2, 4, 1, 3, 5). Member i of that group holds head
// chunk i, which is the chunk it held under the base plan, so the KV cache
// does not move.
func (p Plan) ShiftOrder(dp, pp int) []int {
	out := make([]int, 0, p.SP*p.TP)
	for tp := 0; tp < p.TP; tp++ {
		for sp := 0; sp < p.SP; sp++ {
			out = append(out, p.Rank(Coord{DP: dp, PP: pp, SP: sp, TP: tp}))
		}
	}
	return out
}
