package cudaexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/internal/oracle"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
)

// Seesaw's pairs on 2 and 4 ranks: (prefill, decode) plans.
var seesawPairs = [][2]string{{"pp=2", "tp=2"}, {"pp=4", "tp=4"}}

// seesawSpec is a model whose 4 layers and 4 KV heads split over 4
// pipeline stages or 4 TP ranks without replicating a head.
func seesawSpec(seed uint64) fixture.Spec {
	return fixture.Spec{Heads: 8, KVHeads: 4, Layers: 4, Intermediate: 96, Seed: seed}
}

// seesawPlacements are the Seesaw policy's placements of a pair.
func seesawPlacements(t *testing.T, pair [2]string) *policy.Seesaw {
	t.Helper()
	cp, err := parallel.Parse(pair[0])
	if err != nil {
		t.Fatal(err)
	}
	cd, err := parallel.Parse(pair[1])
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.NewSeesaw(cp, cd)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// Block geometry of seesawSwap: 3 sequences of at most seesawPerSeq
// blocks, on device blocks 3…26, parked in host blocks 39…16 and brought
// back to device blocks 31…24, 16…23 and 8, 10, 12, 14, 9, 11, 13, 15.
const (
	seesawPerSeq     = 8
	seesawDevBlocks  = 32
	seesawHostBlocks = 40
)

// seesawSwap drives Seesaw's executor path by hand on x, whose KV cache is
// under cp (x holds cp and cd, block size 4): prefill three prompts under
// cp, swap them out to the host store, transition to cd, swap them in to
// other device blocks, decode under cd, transition back to cp and decode
// once more. Logits are checked against the float64 oracle with c at
// every step (decodes are teacher-forced with the oracle's greedy tokens,
// whose argmax x must also give in float32); the host store must equal the
// device KV it was pushed from, the KV pool must survive each transition
// and the swapped-in blocks the swap, byte for byte; the swapped bytes are
// blocks × layers × KV heads × block size × head dim × 2 × element bytes
// each way, a transition's weight bytes the new placement's shard sizes
// and its KV bytes (moved plus local) the whole pool.
func seesawSwap(t *testing.T, x *Executor, ref *oracle.Model, cp, cd parallel.Placement, c *checker) {
	t.Helper()
	ctx := context.Background()
	cfg := x.Config()
	vocab := cfg.Vocab
	prompts := [][]int{fixture.Tokens(1, 13, vocab), fixture.Tokens(2, 6, vocab), fixture.Tokens(3, 9, vocab)}
	const decodes = 4
	want := make([][]int, len(prompts)) // the oracle's greedy continuation
	for i, p := range prompts {
		want[i] = ref.Greedy(p, decodes+2)
	}
	blocks, hostBlocks, moved := make([][]int, len(prompts)), make([][]int, len(prompts)), make([][]int, len(prompts))
	var out, in []forward.Swap
	used := 0
	for i := range prompts {
		for j := 0; j < seesawPerSeq; j++ {
			blocks[i] = append(blocks[i], 3+i*seesawPerSeq+j)
			hostBlocks[i] = append(hostBlocks[i], seesawHostBlocks-1-i*seesawPerSeq-j)
			moved[i] = append(moved[i], seesawDevBlocks-1-i*seesawPerSeq-j) // sequence 0: 31 down to 24
			switch i {
			case 1:
				moved[i][j] = 16 + j // one run of consecutive device blocks
			case 2:
				moved[i][j] = 8 + 2*j%seesawPerSeq + 2*j/seesawPerSeq // 8, 10, 12, 14, 9, 11, 13, 15: ascending, not consecutive
			}
		}
		out = append(out, forward.Swap{Device: blocks[i], Host: hostBlocks[i]})
		in = append(in, forward.Swap{Device: moved[i], Host: hostBlocks[i]})
		used += len(blocks[i])
	}

	// Prefill under cp, every position's logits.
	var b forward.Batch
	for i, p := range prompts {
		b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: p, Blocks: blocks[i], NumLogits: len(p)})
	}
	logits, err := x.Step(ctx, &b, cp)
	if err != nil {
		t.Fatal(err)
	}
	row := 0
	for i, p := range prompts {
		wl := ref.Logits(p)
		for j := range p {
			c.row(fmt.Sprintf("prefill under %s, sequence %d position %d", cp.Name, i, j), logits[row*vocab:(row+1)*vocab], wl[j])
			row++
		}
		if got := argmax(logits[(row-1)*vocab : row*vocab]); c.dt == model.Float32 && got != want[i][0] {
			t.Fatalf("sequence %d: first token %d, oracle %d", i, got, want[i][0])
		}
	}
	prefilled := deviceKV(t, x)

	// Swap out: the host store holds exactly the device KV.
	elem := int64(x.dt.Size())
	oneWay := int64(used) * int64(cfg.Layers) * int64(cfg.KVHeads) * int64(x.opts.BlockSize) * int64(cfg.HeadDim) * 2 * elem
	n, err := x.SwapOut(ctx, out)
	if err != nil || n != oneWay {
		t.Fatalf("swap-out under %s: %d bytes, %v; want %d", cp.Name, n, err, oneWay)
	}
	for i := range prompts {
		sameKV(t, cfg, prefilled, blocks[i], hostBlocks[i], func(b, l, h int) []byte { return hostKV(x, b, l, h) }, "host block after swap-out under "+cp.Name)
	}

	// Transition to cd: weights from the host copy, the pool re-laid out.
	transition(t, x, cd, prefilled)

	// Swap in to other device blocks under cd.
	if n, err := x.SwapIn(ctx, in); err != nil || n != oneWay {
		t.Fatalf("swap-in under %s: %d bytes, %v; want %d", cd.Name, n, err, oneWay)
	}
	pulled := deviceKV(t, x)
	for i := range prompts {
		sameKV(t, cfg, prefilled, blocks[i], moved[i], inMap(pulled), "device block after swap-in under "+cd.Name)
	}
	if x.SwapBytes() != 2*oneWay {
		t.Fatalf("SwapBytes %d, want %d", x.SwapBytes(), 2*oneWay)
	}

	decode := func(k int, p parallel.Placement) {
		t.Helper()
		var b forward.Batch
		for i, pr := range prompts {
			seq := append(slices.Clone(pr), want[i][:k+1]...)
			b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: seq[len(seq)-1:], Pos: len(seq) - 1, Blocks: moved[i], NumLogits: 1})
		}
		logits, err := x.Step(ctx, &b, p)
		if err != nil {
			t.Fatal(err)
		}
		for i, pr := range prompts {
			seq := append(slices.Clone(pr), want[i][:k+1]...)
			wl := ref.Logits(seq)
			c.row(fmt.Sprintf("decode %d under %s, sequence %d", k, p.Name, i), logits[i*vocab:(i+1)*vocab], wl[len(wl)-1])
			if got := argmax(logits[i*vocab : (i+1)*vocab]); c.dt == model.Float32 && got != want[i][k+1] {
				t.Fatalf("decode %d under %s, sequence %d: token %d, oracle %d", k, p.Name, i, got, want[i][k+1])
			}
		}
	}
	for k := 0; k < decodes; k++ {
		decode(k, cd)
	}
	transition(t, x, cp, deviceKV(t, x))
	decode(decodes, cp)
	if x.Transitions() != 2 {
		t.Fatalf("%d transitions, want 2", x.Transitions())
	}
}

// transition moves x to placement to and checks what it moved: the weight
// bytes are to's shards (its pieces in the executor's dtype), the KV bytes
// the whole pool, and the pool holds what it held (before) byte for byte.
func transition(t *testing.T, x *Executor, to parallel.Placement, before map[[3]int][]byte) {
	t.Helper()
	cfg := x.Config()
	from := x.Placements()[0]
	st, err := x.Transition(context.Background(), to)
	if err != nil {
		t.Fatal(err)
	}
	var shard int64
	for r := range to.Coords {
		for _, p := range to.Pieces(cfg, r) {
			if p.Tensor != parallel.TKV {
				shard += p.Elems()
			}
		}
	}
	elem := int64(x.dt.Size())
	if st.WeightBytes != shard*elem {
		t.Fatalf("transition %s → %s uploaded %d weight bytes; %s's shards are %d", from.Name, to.Name, st.WeightBytes, to.Name, shard*elem)
	}
	pool := int64(x.KVLayout().NumBlocks) * int64(cfg.Layers) * int64(cfg.KVHeads) * int64(x.opts.BlockSize) * int64(cfg.HeadDim) * 2 * elem
	if st.KVBytes+st.LocalBytes != pool || st.KVBytes == 0 {
		t.Fatalf("transition %s → %s: %d KV bytes moved and %d local, want the pool's %d in all", from.Name, to.Name, st.KVBytes, st.LocalBytes, pool)
	}
	if got := x.Placements()[0]; got.Name != to.Name {
		t.Fatalf("KV cache under %s after a transition to %s", got.Name, to.Name)
	}
	for name, dl := range x.layouts { // only the new placement's weights stay on the device
		if name != to.Name && !dl.layout.SharesKV(cfg, to) {
			t.Fatalf("%s's weights resident after the transition to %s", name, to.Name)
		}
	}
	after := deviceKV(t, x)
	for k, v := range before {
		if !bytes.Equal(after[k], v) {
			t.Fatalf("transition %s → %s: layer %d head %d block %d changed", from.Name, to.Name, k[0], k[1], k[2])
		}
	}
}

// deviceKV reads x's whole KV pool, keyed by (layer, KV head, block): the
// head's keys then values, as stored (bytes of the executor's dtype). With
// KV heads replicated across ranks, the lowest rank's copy.
func deviceKV(t *testing.T, x *Executor) map[[3]int][]byte {
	t.Helper()
	cfg := x.Config()
	hb := x.headBytes()
	out := map[[3]int][]byte{}
	err := x.do(func() error {
		for r, rk := range x.ranks {
			s := x.base.KVSlice(cfg, r)
			layer := int64(x.kv.NumBlocks) * int64(s.Heads.Len()) * hb
			for li := range s.Layers.Len() {
				k, v := make([]byte, layer), make([]byte, layer)
				if err := x.ops.toHost(unsafe.Pointer(&k[0]), rk.kLayers[li], layer); err != nil {
					return err
				}
				if err := x.ops.toHost(unsafe.Pointer(&v[0]), rk.vLayers[li], layer); err != nil {
					return err
				}
				if err := x.ops.sync(); err != nil {
					return err
				}
				for blk := 0; blk < x.kv.NumBlocks; blk++ {
					for h := s.Heads.Lo; h < s.Heads.Hi; h++ {
						key := [3]int{s.Layers.Lo + li, h, blk}
						if _, ok := out[key]; ok {
							continue
						}
						at := (int64(blk)*int64(s.Heads.Len()) + int64(h-s.Heads.Lo)) * hb
						out[key] = append(slices.Clone(k[at:at+hb]), v[at:at+hb]...)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameKV fails t unless, for every layer and KV head, block to[i] as got
// reads it holds the KV that device block from[i] held in before (keyed
// as deviceKV keys it).
func sameKV(t *testing.T, cfg *model.Config, before map[[3]int][]byte, from, to []int, got func(block, layer, head int) []byte, what string) {
	t.Helper()
	for i := range from {
		for l := range cfg.Layers {
			for h := range cfg.KVHeads {
				if !bytes.Equal(got(to[i], l, h), before[[3]int{l, h, from[i]}]) {
					t.Fatalf("%s: block %d layer %d head %d differs from device block %d before", what, to[i], l, h, from[i])
				}
			}
		}
	}
}

// inMap reads blocks out of a deviceKV snapshot, for sameKV.
func inMap(kv map[[3]int][]byte) func(block, layer, head int) []byte {
	return func(b, l, h int) []byte { return kv[[3]int{l, h, b}] }
}

// hostKV is one head of one layer of a host block of x's store: keys then
// values, as stored.
func hostKV(x *Executor, block, layer, head int) []byte {
	h := x.hostKV
	raw := func(p unsafe.Pointer, n int) []byte { return slices.Clone(unsafe.Slice((*byte)(p), n)) }
	n := int(x.headBytes())
	if h.Half() {
		k, v := h.HalfKeys(block, layer, head), h.HalfValues(block, layer, head)
		return append(raw(unsafe.Pointer(&k[0]), n), raw(unsafe.Pointer(&v[0]), n)...)
	}
	k, v := h.Keys(block, layer, head), h.Values(block, layer, head)
	return append(raw(unsafe.Pointer(&k[0]), n), raw(unsafe.Pointer(&v[0]), n)...)
}

// TestSeesawSwapOnHost runs seesawSwap on the emulated device for pp=2 ↔
// tp=2, pp=4 ↔ tp=4, pp=2,tp=2 ↔ tp=4 and pp=4 ↔ pp=2,tp=2: logits within the foundation tolerance of the
// oracle, the oracle's greedy tokens, KV bit-exact through swaps and
// transitions, bytes as the formulas say.
func TestSeesawSwapOnHost(t *testing.T) {
	m, ref := loadFixture(t, seesawSpec(140))
	for _, pair := range append(slices.Clone(seesawPairs), [2]string{"pp=2,tp=2", "tp=4"}, [2]string{"pp=4", "pp=2,tp=2"}) {
		t.Run(pair[0]+"→"+pair[1], func(t *testing.T) {
			pol := seesawPlacements(t, pair)
			x := newHostExecutorOpts(t, m.Config, m.Weights, Options{Placements: pol.Placements(), BlockSize: 4, MaxNumTokens: 64,
				MaxNumSeqs: 8, EnforceEager: true, HostBlocks: seesawHostBlocks}, seesawDevBlocks)
			if _, ok := x.layouts[pol.Decode.Name]; ok {
				t.Fatalf("%s's weights resident before the transition to it", pol.Decode.Name)
			}
			// A stage of 3 model blocks: the 24-block swaps run in chunks.
			x.stageBytes = 3 * x.hostKV.TokenBytes() * int64(x.hostKV.BlockSize)
			seesawSwap(t, x, ref, pol.Prefill, pol.Decode, &checker{t: t, dt: model.Float32})
			if _, ok := x.layouts[pol.Decode.Name]; ok {
				t.Fatalf("%s's weights still resident after the transition back to %s", pol.Decode.Name, pol.Prefill.Name)
			}
		})
	}
}

// seesawEngine serves requests through the engine under the Seesaw policy
// of pair on x (a host store too small for all of them, so the phases
// cycle): every output equals the same request's on single (one rank,
// no policy) and the oracle's greedy continuation, prefills run only
// under the prefill placement and decodes only under the decode
// placement, the policy changes phase several times, each executor
// transition re-sharded the weights, and the engine ends idle with every
// swapped-out byte swapped back in.
func seesawEngine(t *testing.T, x *Executor, single engine.Runner, m *model.Model, ref *oracle.Model, pol *policy.Seesaw) {
	t.Helper()
	var reqs []engine.Request
	for i := 0; i < 8; i++ {
		reqs = append(reqs, engine.Request{ID: fmt.Sprint("r", i), Prompt: fixture.Tokens(400+i, 5+3*(i%4), m.Config.Vocab),
			MaxTokens: 3 + 2*(i%4), IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}})
	}
	alone, _ := generateAll(t, single, nil, m, reqs)
	got, st := generateAll(t, x, pol, m, reqs)
	for i, r := range reqs {
		want := ref.Greedy(r.Prompt, r.MaxTokens)
		if !slices.Equal(got[i].Tokens, want) || !slices.Equal(alone[i].Tokens, want) {
			t.Fatalf("%s: %v, one rank %v, oracle %v", r.ID, got[i].Tokens, alone[i].Tokens, want)
		}
	}
	seesawStats(t, x, m, pol, st)
}

// generateAll serves reqs at once through an engine over x under pol
// (nil: every step under x's placement) and returns the outputs and the
// engine's final stats.
func generateAll(t *testing.T, x engine.Runner, pol policy.Policy, m *model.Model, reqs []engine.Request) ([]*engine.Output, engine.Stats) {
	t.Helper()
	e, err := engine.NewEngine(engine.Options{Exec: x, Policy: pol, Tokenizer: m.Tokenizer, Sched: sched.Config{MaxNumBatchedTokens: 512}})
	if err != nil {
		t.Fatal(err)
	}
	stop := e.Start()
	got := make([]*engine.Output, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = e.Generate(context.Background(), r, nil)
		}()
	}
	wg.Wait()
	stop()
	for i, r := range reqs {
		if errs[i] != nil {
			t.Fatalf("%s: %v", r.ID, errs[i])
		}
	}
	return got, e.Stats()
}

// seesawStats checks what a Seesaw run of x did (seesawEngine).
func seesawStats(t *testing.T, x *Executor, m *model.Model, pol *policy.Seesaw, st engine.Stats) {
	t.Helper()
	steps := x.PlanSteps()
	if steps[pol.Prefill.Name] == 0 || steps[pol.Decode.Name] == 0 {
		t.Fatalf("steps by placement %v; want both", steps)
	}
	if pol.Transitions() < 3 || x.Transitions() < 3 || st.Transitions != int64(x.Transitions()) {
		t.Fatalf("%d phase changes, %d executor transitions, engine %d; want several cycles", pol.Transitions(), x.Transitions(), st.Transitions)
	}
	if mv := x.Moved(); mv.WeightBytes < int64(x.Transitions())*x.weightBytes(pol.Prefill)/2 {
		t.Fatalf("%d transitions uploaded %d weight bytes", x.Transitions(), mv.WeightBytes)
	}
	if st.Running != 0 || st.Waiting != 0 || st.Parked != 0 || st.KVUsage != 0 || st.HostKVUsage != 0 {
		t.Fatalf("engine not idle: %+v", st)
	}
	// Every parked byte came back: pushes hold the model's KV once, and
	// every decode rank pulls its slice (KV heads replicated under TP >
	// KV heads are pulled by each rank holding them).
	var pulled int64
	for r := range pol.Decode.Coords {
		s := pol.Decode.KVSlice(m.Config, r)
		pulled += int64(s.Layers.Len() * s.Heads.Len())
	}
	whole := int64(m.Config.Layers * m.Config.KVHeads)
	if st.SwapOutBytes == 0 || st.SwapInBytes*whole != st.SwapOutBytes*pulled || st.SwapOutBytes+st.SwapInBytes != x.SwapBytes() {
		t.Fatalf("stats %+v (pulls %d/%d of the pushes); executor swapped %d bytes", st, pulled, whole, x.SwapBytes())
	}
	t.Logf("%s → %s: steps %v, %d transitions, %d bytes swapped, %+v moved", pol.Prefill.Name, pol.Decode.Name, steps, x.Transitions(), x.SwapBytes(), x.Moved())
}

// TestSeesawEngineOnHost serves through the engine under --policy seesaw
// on the emulated device, pp=2 → tp=2 and pp=4 → tp=4 (seesawEngine), and
// pp=4 → tp=4 with 2 KV heads, each replicated on two TP ranks.
func TestSeesawEngineOnHost(t *testing.T) {
	for _, kv := range []int{4, 2} {
		spec := seesawSpec(150 + uint64(kv))
		spec.KVHeads = kv
		m, ref := loadFixture(t, spec)
		for _, pair := range seesawPairs {
			if kv == 2 && pair[1] != "tp=4" {
				continue
			}
			t.Run(fmt.Sprintf("kv=%d/%s→%s", kv, pair[0], pair[1]), func(t *testing.T) {
				pol := seesawPlacements(t, pair)
				x := newHostExecutorOpts(t, m.Config, m.Weights, Options{Placements: pol.Placements(), BlockSize: 4, MaxNumTokens: 512,
					MaxNumSeqs: 16, EnforceEager: true, HostBlocks: 8}, 16)
				single := newHostExecutorOpts(t, m.Config, m.Weights, Options{Placements: []parallel.Placement{parallel.Standard(parallel.Single)},
					BlockSize: 4, MaxNumTokens: 512, MaxNumSeqs: 16, EnforceEager: true}, 64)
				// Swap-ins land 2 ms after they are queued: a request
				// decoded before its copy landed would read stale KV.
				side := x.ops.(hostOps).stream
				side.delay = 2 * time.Millisecond
				seesawEngine(t, x, single, m, ref, pol)
				if side.landed == 0 {
					t.Fatal("no swap-in went through the side stream")
				}
			})
		}
	}
}

// TestSeesawSizingOnHost: with Seesaw's placements the KV pool is sized
// per block for the larger placement's layout plus one layer of
// transition headroom, in units of one layer of the model's KV block:
// pp=2/tp=2 over 4 layers and 4 KV heads 4 + 1; pp=4/tp=4 over 2 KV
// heads, each replicated on two TP ranks, 8 (tp=4's layout) + 2 (a
// replicated layer); the extra bytes are the larger weights' (and in
// bfloat16 the stages). One placement needs no headroom.
func TestSeesawSizingOnHost(t *testing.T) {
	for _, c := range []struct {
		kv       int
		pair     [2]string
		perBlock int64 // in units of the model's KV block / 4 (one layer)
	}{{4, [2]string{"pp=2", "tp=2"}, 5}, {2, [2]string{"pp=4", "tp=4"}, 10}} {
		spec := seesawSpec(180)
		spec.KVHeads = c.kv
		m, _ := loadFixture(t, spec)
		cfg := m.Config
		pol := seesawPlacements(t, c.pair)
		x := newHostExecutorOpts(t, cfg, m.Weights, Options{Placements: pol.Placements(), BlockSize: 4, MaxNumTokens: 64, MaxNumSeqs: 8, EnforceEager: true}, 8)
		layer := int64(cfg.KVHeads) * 4 * int64(cfg.HeadDim) * 2 * 4 // one layer of one block, K and V, float32
		resident := x.weightBytes(pol.Prefill)
		extra, perBlock := x.transitionRoom(resident)
		if want := max(0, x.weightBytes(pol.Decode)-resident); perBlock != c.perBlock*layer || extra != want {
			t.Fatalf("kv=%d %v: %d bytes per block (want %d), %d extra (want %d)", c.kv, c.pair, perBlock, c.perBlock*layer, extra, want)
		}
		// In bfloat16 the uploader needs no device stage (it packs on the
		// host); a host store adds the swap stages: a model block per host
		// block, at most 64 MiB, and a block id per head-sized run.
		x.dt, x.opts.HostBlocks = model.BFloat16, 16
		if err := x.initHost(m.Weights); err != nil {
			t.Fatal(err)
		}
		stage := 16 * int64(cfg.Layers) * layer / 2 // the model block in bfloat16
		want := max(0, x.weightBytes(pol.Decode)-x.weightBytes(pol.Prefill)) + stage + 4*(stage/(2*4*int64(cfg.HeadDim)*2))
		if extra, _ := x.transitionRoom(x.weightBytes(pol.Prefill)); extra != want {
			t.Fatalf("kv=%d %v in bfloat16 with 16 host blocks: %d extra bytes, want %d", c.kv, c.pair, extra, want)
		}
		single := newHostExecutorOpts(t, cfg, m.Weights, Options{Placements: []parallel.Placement{pol.Prefill}, BlockSize: 4, MaxNumTokens: 64, MaxNumSeqs: 8, EnforceEager: true}, 8)
		if extra, perBlock := single.transitionRoom(resident); extra != 0 || perBlock != int64(cfg.Layers)*layer {
			t.Fatalf("one placement: %d extra, %d per block; want 0 and the model's block %d", extra, perBlock, int64(cfg.Layers)*layer)
		}
	}
}

// TestSeesawRefusalsOnHost: a transition to a placement the executor does
// not run, a swap without a host store or of blocks outside the tiers, and
// a transition to the current placement (a no-op) leave the executor
// usable.
func TestSeesawRefusalsOnHost(t *testing.T) {
	m, ref := loadFixture(t, seesawSpec(190))
	pol := seesawPlacements(t, seesawPairs[0])
	x := newHostExecutorOpts(t, m.Config, m.Weights, Options{Placements: pol.Placements(), BlockSize: 4, MaxNumTokens: 64, MaxNumSeqs: 8, EnforceEager: true, HostBlocks: 4}, 8)
	ctx := context.Background()
	if _, err := x.Transition(ctx, parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 2, TP: 1})); err == nil {
		t.Fatal("transition to sp=2, not one of the placements: no error")
	}
	if st, err := x.Transition(ctx, pol.Prefill); err != nil || st != (parallel.TransitionStats{}) || x.Transitions() != 0 {
		t.Fatalf("transition to the current placement: %+v, %v, %d transitions", st, err, x.Transitions())
	}
	for _, sw := range []forward.Swap{{Device: []int{8}, Host: []int{0}}, {Device: []int{0}, Host: []int{4}}, {Device: []int{0, 1}, Host: []int{0}}, {Replica: 1, Device: []int{0}, Host: []int{0}}} {
		if _, err := x.SwapOut(ctx, []forward.Swap{sw}); err == nil {
			t.Fatalf("swap %+v: no error", sw)
		}
	}
	none := newHostExecutor(t, m.Config, m.Weights, pol.Placements(), 8)
	if _, err := none.SwapIn(ctx, []forward.Swap{{Device: []int{0}, Host: []int{0}}}); err == nil {
		t.Fatal("swap-in without a host store: no error")
	}
	prompt := fixture.Tokens(7, 9, m.Config.Vocab)
	logits, err := x.Step(ctx, &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: prompt, Blocks: []int{0, 1, 2}, NumLogits: 1}}}, pol.Prefill)
	if err != nil {
		t.Fatal(err)
	}
	want := ref.Logits(prompt)
	(&checker{t: t, dt: model.Float32}).row("after the refusals", logits, want[len(want)-1])
	if _, err := x.Step(ctx, &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: prompt, Blocks: []int{0, 1, 2}, NumLogits: 1}}}, pol.Decode); err == nil {
		t.Fatalf("a step under %s before the transition to it: no error", pol.Decode.Name)
	}
}

// failingOps is the emulated device with an allocation that fails once
// allocs more have succeeded.
type failingOps struct {
	hostOps
	allocs *int
}

func (o failingOps) alloc(bytes int64) (cuda.DevicePtr, error) {
	if *o.allocs == 0 {
		return 0, errors.New("out of memory (injected)")
	}
	*o.allocs--
	return o.hostOps.alloc(bytes)
}

// TestSeesawFailedTransitionOnHost: a transition whose allocation fails
// half-way (after the old weights are freed and some KV layers moved)
// returns the error, and every later step, swap and transition returns it
// too rather than running on a half-moved cache.
func TestSeesawFailedTransitionOnHost(t *testing.T) {
	m, _ := loadFixture(t, seesawSpec(200))
	pol := seesawPlacements(t, seesawPairs[0])
	x := newHostExecutorOpts(t, m.Config, m.Weights, Options{Placements: pol.Placements(), BlockSize: 4, MaxNumTokens: 64, MaxNumSeqs: 8, EnforceEager: true, HostBlocks: 4}, 8)
	n := 3 // the fourth allocation fails: rank 1's values of layer 0 under tp=2, after the old weights were freed
	x.ops = failingOps{x.ops.(hostOps), &n}
	ctx := context.Background()
	if _, err := x.Transition(ctx, pol.Decode); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("transition with a failing allocation: %v", err)
	}
	b := &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: []int{1, 2, 3}, Blocks: []int{0}, NumLogits: 1}}}
	_, stepErr := x.Step(ctx, b, pol.Prefill)
	_, swapErr := x.SwapOut(ctx, []forward.Swap{{Device: []int{0}, Host: []int{0}}})
	_, trErr := x.Transition(ctx, pol.Prefill)
	for _, err := range []error{stepErr, swapErr, trErr} {
		if err == nil || !strings.Contains(err.Error(), "unusable") {
			t.Fatalf("after a failed transition: %v, want the executor unusable", err)
		}
	}
}

// TestSwapsBesideStepOnHost: a swap's copies run on the side stream, so a
// step runs while they are in flight (the emulated side stream lands them
// only 300 ms after they are queued), and the swap returns only once they
// have landed: after the swap-out the host store holds the device KV
// byte for byte, after the swap-in the new device blocks do.
func TestSwapsBesideStepOnHost(t *testing.T) {
	m, _ := loadFixture(t, seesawSpec(160))
	pol := seesawPlacements(t, seesawPairs[0])
	x := newHostExecutorOpts(t, m.Config, m.Weights, Options{Placements: pol.Placements(), BlockSize: 4, MaxNumTokens: 64,
		MaxNumSeqs: 8, EnforceEager: true, HostBlocks: seesawHostBlocks}, seesawDevBlocks)
	ctx := context.Background()
	vocab := m.Config.Vocab
	a, b := fixture.Tokens(1, 13, vocab), fixture.Tokens(2, 6, vocab)
	ab, bb, moved, host := []int{0, 1, 2, 3}, []int{4, 5}, []int{8, 9, 10, 11}, []int{7, 6, 5, 4}
	batch := &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: a, Blocks: ab, NumLogits: 1}, {Tokens: b, Blocks: bb, NumLogits: 1}}}
	if _, err := x.Step(ctx, batch, pol.Prefill); err != nil {
		t.Fatal(err)
	}
	before := deviceKV(t, x)
	side := x.ops.(hostOps).stream
	side.delay = 300 * time.Millisecond
	pos := len(b)
	// beside runs swap on another goroutine and a decode step of b while
	// its copies are in flight.
	beside := func(name string, swap func() (int64, error)) {
		t.Helper()
		var landedBefore int
		x.do(func() error { landedBefore = side.landed; return nil })
		start := time.Now()
		type result struct {
			err error
			at  time.Duration
		}
		done := make(chan result, 1)
		go func() {
			_, err := swap()
			done <- result{err, time.Since(start)}
		}()
		time.Sleep(20 * time.Millisecond) // the copies are queued
		decode := &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: []int{3}, Pos: pos, Blocks: bb, NumLogits: 1}}}
		if _, err := x.Step(ctx, decode, pol.Prefill); err != nil {
			t.Fatal(err)
		}
		pos++
		stepped := time.Since(start)
		var landed int
		x.do(func() error { landed = side.landed - landedBefore; return nil })
		if landed != 0 {
			t.Fatalf("%s: %d side copies landed before the step ended at %v; the delay is %v", name, landed, stepped, side.delay)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.at < side.delay || stepped > r.at {
			t.Fatalf("%s returned at %v, the step at %v; the copies land at %v", name, r.at, stepped, side.delay)
		}
		t.Logf("%s: the step ended at %v, the swap at %v", name, stepped, r.at)
	}
	beside("swap-out", func() (int64, error) { return x.SwapOut(ctx, []forward.Swap{{Device: ab, Host: host}}) })
	sameKV(t, m.Config, before, ab, host, func(b, l, h int) []byte { return hostKV(x, b, l, h) }, "host block after swap-out")
	beside("swap-in", func() (int64, error) { return x.SwapIn(ctx, []forward.Swap{{Device: moved, Host: host}}) })
	sameKV(t, m.Config, before, ab, moved, inMap(deviceKV(t, x)), "device block after swap-in")
}
