package rankproc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/internal/mpitest"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// A case of the plan × batch equivalence matrix: the placements the
// executor holds and which one each step of the scenario runs under.
type equivCase struct {
	name       string
	placements []parallel.Placement
	pick       func(step int) int // index into placements
}

func plan(t testing.TB, s string) parallel.Plan {
	t.Helper()
	p, err := parallel.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// equivCases are the cases for a job of p processes.
func equivCases(t testing.TB, p int) []equivCase {
	first := func(int) int { return 0 }
	one := func(s string) equivCase {
		return equivCase{name: s, placements: []parallel.Placement{parallel.Standard(plan(t, s))}, pick: first}
	}
	shift := func(s string) equivCase {
		base := plan(t, s)
		return equivCase{name: "shift " + s, placements: []parallel.Placement{parallel.Standard(base), parallel.ShiftPlacement(base)},
			pick: func(step int) int { return step % 2 }}
	}
	if p == 2 {
		return []equivCase{one("tp=2"), one("sp=2"), one("pp=2"), one("dp=2"), shift("sp=2")}
	}
	return []equivCase{one("tp=4"), one("sp=2,tp=2"), one("pp=2,tp=2"), one("dp=2,sp=2"), one("pp=4"), shift("sp=2,tp=2")}
}

// TestMPIEquivalence runs the matrix on 2 and 4 MPI processes: greedy
// tokens equal to one rank's, logits bit-identical to the same plan on the
// in-process transport, and every process's byte counters equal to its
// rank's there.
func TestMPIEquivalence(t *testing.T) {
	for _, p := range []int{2, 4} {
		out, err := mpitest.Run(t, mpitest.Options{Procs: p, Run: "TestMPIRanks", Mode: "equivalence"})
		if err != nil {
			t.Fatalf("P=%d: %v\n%s", p, err, out)
		}
		for _, c := range equivCases(t, p) {
			for r := range p {
				if want := fmt.Sprintf("process %d/%d: %s: equal", r, p, c.name); !strings.Contains(out, want) {
					t.Errorf("P=%d: no %q in the output:\n%s", p, want, out)
				}
			}
		}
		t.Logf("P=%d:\n%s", p, out)
	}
}

// TestMPIRanks is what the launched processes run; it skips in an
// ordinary test run.
func TestMPIRanks(t *testing.T) {
	if mpitest.Mode() == "" {
		t.Skip("run by TestMPIEquivalence under mpirun")
	}
	m, err := comm.OpenMPI(comm.MPIOptions{})
	if err != nil {
		t.Fatal(err)
	}
	md := loadFixture(t)
	single := runScenario(t, md, []parallel.Placement{parallel.Standard(parallel.Single)}, func(int) int { return 0 }, nil)
	for _, c := range equivCases(t, m.Size()) {
		local := runScenario(t, md, c.placements, c.pick, nil)
		dist := runScenario(t, md, c.placements, c.pick, m)
		me := m.Rank()
		if me == 0 {
			if !equalInts(dist.tokens, single.tokens) {
				t.Fatalf("%s: greedy tokens %v, one rank %v", c.name, dist.tokens, single.tokens)
			}
			for i := range dist.logits {
				if !sameBits(dist.logits[i], local.logits[i]) {
					t.Fatalf("%s: step %d logits differ from the in-process transport's", c.name, i)
				}
			}
		}
		want := maps.Clone(local.stats)
		maps.DeleteFunc(want, func(k comm.Key, _ comm.Counter) bool { return k.Rank != me })
		if !maps.Equal(dist.stats, want) {
			t.Fatalf("%s: process %d counters\n%v\nin-process\n%v", c.name, me, dist.stats, want)
		}
		fmt.Printf("process %d/%d: %s: equal greedy tokens, logits and counters\n", me, m.Size(), c.name)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func loadFixture(t testing.TB) *model.Model {
	t.Helper()
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Heads: 8, KVHeads: 4, Layers: 4, Intermediate: 96, Seed: 19})
	if err != nil {
		t.Fatal(err)
	}
	md, err := model.Load(dir, model.Options{DType: model.Float32})
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// result is what a scenario produced: process 0's greedy tokens and every
// step's logits, and this process's counters.
type result struct {
	tokens []int
	logits [][]float32
	stats  comm.Stats
}

// runScenario runs greedy generation for four sequences: two prefill
// steps (chunks of the prompts), then six decode steps, placements by
// pick. With m nil every rank runs in this process; otherwise process 0
// drives and the others follow.
func runScenario(t testing.TB, md *model.Model, placements []parallel.Placement, pick func(int) int, m *comm.MPI) result {
	t.Helper()
	opts := cpuexec.Options{Placements: placements, BlockSize: 8, NumBlocks: 64}
	if m != nil {
		opts.World = func(int) (*comm.World, error) { return m.NewWorld(0) }
	}
	x, err := cpuexec.NewExecutor(md.Config, md.Weights, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if m != nil && m.Rank() != 0 {
		if err := Follow(ctx, x, m, nil); !errors.Is(err, ErrShutdown) {
			t.Fatalf("process %d: %v", m.Rank(), err)
		}
		return result{stats: x.CommStats()}
	}
	var step func(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]float32, error) = x.Step
	if m != nil {
		d, err := NewDriver(x, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		}()
		step = d.Step
	}
	cfg := md.Config
	dp := placements[0].Plan.DP
	prompts := [][]int{fixture.Tokens(1, 13, cfg.Vocab), fixture.Tokens(2, 7, cfg.Vocab), fixture.Tokens(3, 21, cfg.Vocab), fixture.Tokens(4, 5, cfg.Vocab)}
	seqs := make([]forward.SeqBatch, len(prompts))
	for i := range seqs {
		rep := i % dp
		slot := i / dp
		for k := range 8 {
			seqs[i].Blocks = append(seqs[i].Blocks, slot*8+k)
		}
		seqs[i].Replica = rep
	}
	var res result
	done := make([]int, len(prompts)) // tokens in the KV cache
	for s := range 8 {
		var b forward.Batch
		for i, pr := range prompts {
			sq := seqs[i]
			sq.Pos = done[i]
			switch {
			case s == 0:
				sq.Tokens = pr[:len(pr)/2]
			case s == 1:
				sq.Tokens = pr[len(pr)/2:]
			default:
				sq.Tokens = prompts[i][len(prompts[i])-1:]
			}
			sq.NumLogits = 1
			b.Seqs = append(b.Seqs, sq)
		}
		logits, err := step(ctx, &b, placements[pick(s)])
		if err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		res.logits = append(res.logits, append([]float32(nil), logits...))
		for i := range prompts {
			done[i] += len(b.Seqs[i].Tokens)
			if s >= 1 {
				tok := argmax(logits[i*cfg.Vocab : (i+1)*cfg.Vocab])
				res.tokens = append(res.tokens, tok)
				prompts[i] = append(prompts[i], tok)
			}
		}
	}
	res.stats = x.CommStats()
	return res
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestMPILongSteps: steps far longer than the transport's timeout (a
// quarter of a 1,000-token prefill on this machine) succeed when one
// process computes while the other waits: under dp=2 the follower waits
// for the next step while process 0 prefills a long prompt or idles
// (process 0's pings keep it), and process 0 waits for the logits while
// the follower prefills (the follower's alive replies keep it).
func TestMPILongSteps(t *testing.T) {
	out, err := mpitest.Run(t, mpitest.Options{Procs: 2, Run: "TestMPILongStepsProcess", Mode: "long"})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "long steps: equal to the in-process transport") {
		t.Fatalf("no success line:\n%s", out)
	}
	t.Log(out)
}

// TestMPILongStepsProcess is what the launched processes of
// TestMPILongSteps run.
func TestMPILongStepsProcess(t *testing.T) {
	if mpitest.Mode() != "long" {
		t.Skip("run by TestMPILongSteps under mpirun")
	}
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Hidden: 512, Intermediate: 2048, Layers: 4, Heads: 8, KVHeads: 4, MaxPositions: 1024, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	md, err := model.Load(dir, model.Options{DType: model.Float32})
	if err != nil {
		t.Fatal(err)
	}
	placements := []parallel.Placement{parallel.Standard(plan(t, "dp=2"))}
	build := func(world func(int) (*comm.World, error)) *cpuexec.Executor {
		x, err := cpuexec.NewExecutor(md.Config, md.Weights, cpuexec.Options{Placements: placements, BlockSize: 16, NumBlocks: 64, World: world})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	long := fixture.Tokens(3, 1000, md.Config.Vocab)
	blocks := make([]int, 63)
	for i := range blocks {
		blocks[i] = i
	}
	// Step 0: the follower's replica prefills 1,000 tokens, process 0's one.
	// Step 1: the other way round.
	steps := []forward.Batch{
		{Seqs: []forward.SeqBatch{{Tokens: long[:1], Blocks: blocks, NumLogits: 1, Replica: 0}, {Tokens: long, Blocks: blocks, NumLogits: 1, Replica: 1}}},
		{Seqs: []forward.SeqBatch{{Tokens: long[1:], Pos: 1, Blocks: blocks, NumLogits: 1, Replica: 0}, {Tokens: long[:1], Pos: 1000, Blocks: blocks, NumLogits: 1, Replica: 1}}},
	}
	// The in-process reference first, on every process: its quickest step
	// over two passes sets the timeout to a quarter of a long prefill
	// here, whatever this machine's speed. (The quickest: under go test
	// ./... other packages' tests may slow a pass, which would set a
	// timeout the MPI steps, run later, are not long against.)
	local := build(nil)
	var want [][]float32
	quickest := time.Duration(math.MaxInt64)
	for pass := range 2 {
		for i := range steps {
			start := time.Now()
			out, err := local.Step(context.Background(), &steps[i], placements[0])
			if err != nil {
				t.Fatal(err)
			}
			quickest = min(quickest, time.Since(start))
			if pass == 0 {
				want = append(want, append([]float32(nil), out...))
			} else if !sameBits(out, want[i]) {
				t.Fatalf("step %d: the in-process transport's second pass differs from its first", i)
			}
		}
	}
	timeout := max(quickest/4, 20*time.Millisecond)
	m, err := comm.OpenMPI(comm.MPIOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	x := build(func(int) (*comm.World, error) { return m.NewWorld(0) })
	if m.Rank() != 0 {
		if err := Follow(context.Background(), x, m, nil); !errors.Is(err, ErrShutdown) {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	d, err := NewDriver(x, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range steps {
		start := time.Now()
		got, err := d.Step(context.Background(), &steps[i], placements[0])
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		took := time.Since(start)
		if !sameBits(got, want[i]) {
			t.Fatalf("step %d: logits differ from the in-process transport's", i)
		}
		if took < 2*timeout {
			t.Fatalf("step %d took %v, not long against the %v timeout: the test shows nothing", i, took, timeout)
		}
		fmt.Printf("long step %d: %v (timeout %v)\n", i, took.Round(time.Millisecond), timeout.Round(time.Millisecond))
		if i == 0 {
			// Process 0 busy outside a step for longer than the timeout
			// (as an engine may be): its pings keep the follower waiting.
			time.Sleep(2 * timeout)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Println("long steps: equal to the in-process transport")
}
