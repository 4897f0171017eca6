package cpuexec

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// TestSwapReshard is Seesaw's KV path for every (prefill, decode) pair of
// the TP×PP layouts of 4 ranks, with 4 KV heads and with 2 (KV heads
// replicated under TP 4): prefill under c_p, swap every sequence out to
// the host store, reshard to c_d with an empty cache, swap in to other
// device blocks, decode under c_d. The host store holds the model's KV
// exactly once and bit-exact (equal to a single rank's when c_p is pure
// PP), every rank's pulled slice equals it, and the greedy tokens equal
// one rank's.
func TestSwapReshard(t *testing.T) {
	layouts := []parallel.Plan{{DP: 1, PP: 1, SP: 1, TP: 4}, {DP: 1, PP: 4, SP: 1, TP: 1}, {DP: 1, PP: 2, SP: 1, TP: 2}}
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, kv := range []int{4, 2} {
		l := load(t, fixture.Spec{Heads: 8, KVHeads: kv, Layers: 4, Intermediate: 96, Seed: uint64(320 + kv)})
		cfg := l.m.Config
		prompts := [][]int{fixture.Tokens(1, 13, cfg.Vocab), fixture.Tokens(2, 6, cfg.Vocab), fixture.Tokens(3, 9, cfg.Vocab)}
		const steps = 6
		single, err := NewExecutor(cfg, l.m.Weights, Options{BlockSize: 4, NumBlocks: 32, Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		want, singleKV := swapRun(t, single, prompts, steps)
		for _, cp := range layouts {
			for _, cd := range layouts {
				t.Run(fmt.Sprintf("kv=%d/%s→%s", kv, cp, cd), func(t *testing.T) {
					// One micro-batch: the GEMMs then see the single rank's rows,
					// so a pure-PP prefill's arithmetic is the single rank's.
					e, err := NewExecutor(cfg, l.m.Weights, Options{Plan: cp, BlockSize: 4, NumBlocks: 32, MicroBatches: 1, HostBlocks: 40, Pool: pool})
					if err != nil {
						t.Fatal(err)
					}
					got, hostKV := swapRun(t, e, prompts, steps, parallel.Standard(cd))
					if cp.PP == 4 { // PP changes no arithmetic: the single rank's KV, bit for bit
						assertKVEqual(t, "host store after a pp=4 prefill", hostKV, singleKV)
					}
					for i := range want {
						if !slices.Equal(got[i], want[i]) {
							t.Fatalf("sequence %d: %v, single rank %v", i, got[i], want[i])
						}
					}
				})
			}
		}
	}
}

// swapRun prefills prompts on e under its placement, then, with decode
// placements given, swaps the KV out to a host store, reshards to the
// decode placement, swaps it into other device blocks (checking every
// rank's KV against the store) and decodes there; without, it decodes in
// place. It returns the greedy tokens and the KV after prefill, keyed as
// globalKV keys it, by (layer, head, position block of each sequence).
func swapRun(t *testing.T, e *Executor, prompts [][]int, steps int, decode ...parallel.Placement) ([][]int, map[[3]int][]float32) {
	t.Helper()
	cfg := e.cfg
	const perSeq = 8
	blocks := make([][]int, len(prompts))
	for i := range blocks {
		for b := 0; b < perSeq; b++ {
			blocks[i] = append(blocks[i], 3+i*perSeq+b) // device blocks 3…26
		}
	}
	var b forward.Batch
	for i, p := range prompts {
		b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: p, Blocks: blocks[i], NumLogits: 1})
	}
	logits, err := e.Step(context.Background(), &b, e.KVPlacement())
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([][]int, len(prompts))
	for i := range prompts {
		tokens[i] = []int{tensor.MaxIndex(logits[i*cfg.Vocab : (i+1)*cfg.Vocab])}
	}
	// The KV after prefill, keyed by (layer, head, sequence·perSeq + block index).
	kvOf := func(get func(layer, head, block int) []float32) map[[3]int][]float32 {
		out := map[[3]int][]float32{}
		for i, p := range prompts {
			for j := 0; j < (len(p)+e.kv.BlockSize-1)/e.kv.BlockSize; j++ {
				for layer := 0; layer < cfg.Layers; layer++ {
					for h := 0; h < cfg.KVHeads; h++ {
						out[[3]int{layer, h, i*perSeq + j}] = get(layer, h, blocks[i][j])
					}
				}
			}
		}
		return out
	}
	device := globalKV(e)
	prefillKV := kvOf(func(layer, head, block int) []float32 { return device[[3]int{layer, head, block}] })
	dec := e.KVPlacement()
	if len(decode) > 0 {
		dec = decode[0]
		host := e.host
		hostBlocks := make([][]int, len(prompts))
		var out, in []forward.Swap
		moved := make([][]int, len(prompts))
		for i := range prompts {
			for j := range blocks[i] {
				hostBlocks[i] = append(hostBlocks[i], 39-i*perSeq-j)
				moved[i] = append(moved[i], 31-i*perSeq-j) // other device blocks: 31 down to 8
			}
			out = append(out, forward.Swap{Device: blocks[i], Host: hostBlocks[i]})
			in = append(in, forward.Swap{Device: moved[i], Host: hostBlocks[i]})
		}
		n, err := e.SwapOut(context.Background(), out)
		all := kvcache.Slice{LayerHi: cfg.Layers, HeadHi: cfg.KVHeads}
		if want := int64(e.kv.ElemBytes()) * int64(len(prompts)*perSeq) * all.Elems(e.kv.BlockSize, cfg.HeadDim); err != nil || n != want {
			t.Fatalf("swap-out: %d bytes (want the model's KV once, %d), %v", n, want, err)
		}
		hostKV := kvOf(func(layer, head, block int) []float32 {
			for i := range blocks {
				if j := slices.Index(blocks[i], block); j >= 0 {
					if host.Half() {
						return bitsKV(host.HalfKeys(hostBlocks[i][j], layer, head), host.HalfValues(hostBlocks[i][j], layer, head))
					}
					return append(slices.Clone(host.Keys(hostBlocks[i][j], layer, head)), host.Values(hostBlocks[i][j], layer, head)...)
				}
			}
			return nil
		})
		assertKVEqual(t, "host store after swap-out", hostKV, prefillKV)
		if _, err := e.Reshard(context.Background(), dec); err != nil {
			t.Fatal(err)
		}
		if _, err := e.SwapIn(context.Background(), in); err != nil {
			t.Fatal(err)
		}
		device := globalKV(e)
		pulled := kvOf(func(layer, head, block int) []float32 {
			for i := range blocks {
				if j := slices.Index(blocks[i], block); j >= 0 {
					return device[[3]int{layer, head, moved[i][j]}]
				}
			}
			return nil
		})
		assertKVEqual(t, "device KV after swap-in under "+dec.Name, pulled, prefillKV)
		blocks = moved
	}
	for s := 1; s < steps; s++ {
		b.Seqs = b.Seqs[:0]
		for i, p := range prompts {
			pos := len(p) + len(tokens[i]) - 1
			b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: tokens[i][len(tokens[i])-1:], Pos: pos, Blocks: blocks[i], NumLogits: 1})
		}
		logits, err := e.Step(context.Background(), &b, dec)
		if err != nil {
			t.Fatal(err)
		}
		for i := range prompts {
			tokens[i] = append(tokens[i], tensor.MaxIndex(logits[i*cfg.Vocab:(i+1)*cfg.Vocab]))
		}
	}
	return tokens, prefillKV
}
