package sim_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sim"
)

// execSeq is one test sequence: its tokens so far and its blocks.
type execSeq struct {
	replica int
	blocks  []int
	pos     int
}

// TestCommBytesMatchExecutor runs real steps of the CPU executor under
// many layouts and holds the simulator's per-rank, per-kind collective
// counts (calls, bytes sent, bytes received) equal to the executor's comm
// counters, exactly.
func TestCommBytesMatchExecutor(t *testing.T) {
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Heads: 8, KVHeads: 2, Layers: 3, Intermediate: 100, Vocab: 331, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.Config
	node, err := sim.ParseNode("8xH100")
	if err != nil {
		t.Fatal(err)
	}
	cm, err := sim.NewCostModel(node, sim.CPUPrecision) // the CPU engine's float32 wire elements
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		plan  string
		shift bool // run the steps under the base plan's shift placement
		micro int
	}{
		{plan: "tp=2"}, {plan: "tp=4"}, {plan: "sp=2"}, {plan: "sp=4"}, {plan: "sp=8"},
		{plan: "sp=2,tp=2"}, {plan: "sp=2,tp=2", shift: true}, {plan: "sp=4,tp=2", shift: true},
		{plan: "pp=2"}, {plan: "pp=2", micro: 3}, {plan: "pp=3,tp=2"}, {plan: "pp=2,sp=2"},
		{plan: "dp=2"}, {plan: "dp=2,sp=2"}, {plan: "dp=2,tp=2,pp=2"},
	}
	for _, tc := range cases {
		name := tc.plan
		if tc.shift {
			name += "/shift"
		}
		if tc.micro > 0 {
			name += "/micro"
		}
		t.Run(name, func(t *testing.T) {
			base, err := parallel.Parse(tc.plan)
			if err != nil {
				t.Fatal(err)
			}
			placements := []parallel.Placement{parallel.Standard(base)}
			if tc.shift {
				placements = append(placements, parallel.ShiftPlacement(base))
			}
			exec, err := cpuexec.NewExecutor(cfg, m.Weights, cpuexec.Options{
				Placements: placements, BlockSize: 4, NumBlocks: 64, MicroBatches: tc.micro,
			})
			if err != nil {
				t.Fatal(err)
			}
			run := placements[len(placements)-1]
			lc, err := cm.Layout(cfg, run)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			seqs := make([]*execSeq, 5)
			next := make([]int, base.DP)
			for i := range seqs {
				s := &execSeq{replica: i % base.DP}
				for range 12 {
					s.blocks = append(s.blocks, next[s.replica])
					next[s.replica]++
				}
				seqs[i] = s
			}
			// Steps: prefill chunks of odd lengths, then chunks mixed with
			// decodes, then decodes only; logits on some tokens.
			steps := [][]struct{ seq, n, logits int }{
				{{0, 13, 1}, {1, 5, 0}, {2, 1, 1}},
				{{1, 6, 1}, {0, 1, 1}, {3, 9, 9}, {4, 2, 0}, {2, 1, 1}},
				{{0, 1, 1}, {1, 1, 1}, {2, 1, 1}, {3, 1, 1}, {4, 1, 1}},
				{{4, 7, 1}},
			}
			for i, st := range steps {
				var b forward.Batch
				var shape sim.StepShape
				shape.MicroBatches = tc.micro
				for _, x := range st {
					s := seqs[x.seq]
					tokens := make([]int, x.n)
					for j := range tokens {
						tokens[j] = rng.IntN(cfg.Vocab)
					}
					b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: tokens, Pos: s.pos, Blocks: s.blocks, NumLogits: x.logits, Replica: s.replica})
					shape.Seqs = append(shape.Seqs, sim.Seq{Context: s.pos, New: x.n, Logits: x.logits, Replica: s.replica})
					s.pos += x.n
				}
				before := exec.CommStats()
				if _, err := exec.Step(context.Background(), &b, run); err != nil {
					t.Fatal(err)
				}
				got := exec.CommStats().Sub(before)
				for r := 0; r < base.Ranks(); r++ {
					want := lc.StepTime(r, &shape).CommBytes
					for k := comm.Kind(0); int(k) < sim.NumCommKinds; k++ {
						c := got.Sum(func(key comm.Key) bool { return key.Rank == r && key.Kind == k })
						if c != want[k] {
							t.Errorf("step %d rank %d %s: executor %+v, sim %+v", i, r, k, c, want[k])
						}
					}
				}
			}
		})
	}
}
