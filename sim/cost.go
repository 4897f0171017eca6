package sim

import (
	"fmt"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// CostModel predicts the duration of the kernels, collectives and copies
// of a step on one node, for one precision. Every function returns
// seconds. It is immutable and safe for concurrent use.
//
// A kernel takes max(compute, memory) plus the GPU's kernel latency:
// compute is its FLOPs at the dense peak of the dtype it runs in times an
// efficiency, memory its bytes at the datasheet bandwidth times an
// efficiency (a roofline with fitted roofs). A collective takes a kernel
// latency, one hop latency per algorithm step, and the bytes a member
// moves (counted by package comm's volume functions) at the link's
// bandwidth times its efficiency (an alpha-beta model).
type CostModel struct {
	Node      Node
	Precision Precision

	eff       Efficiency
	bw        float64 // device memory bytes per second (datasheet)
	actPeak   float64 // FLOP/s of 16-bit (TF32 for float32) tensor math: attention, BF16 GEMMs
	w8a8      bool    // FP8 weights run on FP8 tensor cores with per-step activation quantization
	fp8Peak   float64
	actBytes  int64
	kvBytes   int64
	wgtBytes  int64
	actDType  DType
	wgtDType  DType
	hostBytes float64 // host↔device bytes per second, one direction
}

// NewCostModel binds the cost model to a node and a precision.
func NewCostModel(node Node, p Precision) (*CostModel, error) {
	g := node.GPU
	if node.Count < 1 {
		return nil, fmt.Errorf("sim: node %s has no GPUs", node)
	}
	if !(g.HBMBytesPerS > 0) || !(g.BF16FLOPS > 0) || !(g.Eff.Matmul > 0) || !(g.Eff.Memory > 0) || !(g.Eff.Attention > 0) {
		return nil, fmt.Errorf("sim: GPU %s lacks bandwidth, peak or efficiency numbers", g.Name)
	}
	if node.Count > 1 && !(node.Link.BytesPerS > 0 && node.Link.Efficiency > 0) {
		return nil, fmt.Errorf("sim: node %s has no link bandwidth", node)
	}
	if p.Activations == FP8 || p.Activations == Q8 {
		return nil, fmt.Errorf("sim: activations must be bf16, fp16 or fp32, got %s", p.Activations)
	}
	if p.KV == Q8 {
		return nil, fmt.Errorf("sim: the KV cache is bf16, fp16, fp32 or fp8, not q8_0")
	}
	c := &CostModel{
		Node: node, Precision: p, eff: g.Eff, bw: g.HBMBytesPerS,
		actPeak: g.BF16FLOPS, fp8Peak: g.FP8FLOPS,
		actBytes: int64(p.Activations.Bytes()), kvBytes: int64(p.KV.Bytes()), wgtBytes: int64(p.Weights.Bytes()),
		actDType: p.Activations, wgtDType: p.Weights,
	}
	if p.Activations == FP32 {
		c.actPeak = g.BF16FLOPS / 2
	}
	c.w8a8 = p.Weights == FP8 && g.FP8FLOPS > 0 && p.Activations != FP32
	host := node.Host.BytesPerS
	if !(host > 0) {
		host = g.PCIeBytesPerS // a Node built without NewNode
	}
	c.hostBytes = host * LinkEfficiency
	if !(c.hostBytes > 0) {
		c.hostBytes = g.HBMBytesPerS * g.Eff.Memory
	}
	return c, nil
}

// Efficiency is the efficiency constants in use.
func (c *CostModel) Efficiency() Efficiency { return c.eff }

// kernel is one kernel's roofs, seconds.
type kernel struct{ compute, memory float64 }

func (k kernel) time(latency float64) float64 { return max(k.compute, k.memory) + latency }

// gemm is out[m, n] = in[m, k]·w[n, k]ᵀ with weights of dtype w: 2mnk
// FLOPs at Matmul times the larger of the dtype's tensor peak times
// s(m)·s(n)·s(k) and the CUDA cores' FP32 peak (a GEMM of a few rows runs
// as a GEMV on the CUDA cores, not in tensor-core tiles it would leave
// mostly empty; without this floor a one-row GEMM on a GPU of low tensor
// peak per byte, the H20, would be compute-bound at about twice its
// memory time, while GEMVs stream weights at the memory's rate); the
// weights (n·k) streamed at the memory efficiency of their size and the
// activations (m·k in, m·n out) at the streaming efficiency. A device
// with a measured curve for w (GPU.WeightGEMM) computes at Matmul times
// that curve instead.
func (c *CostModel) gemm(m, n, k int, w DType) kernel {
	if m <= 0 || n <= 0 || k <= 0 {
		return kernel{}
	}
	fm, fn, fk := float64(m), float64(n), float64(k)
	peak := c.actPeak
	if w == FP8 && c.w8a8 {
		peak = c.fp8Peak
	}
	rate := c.eff.Matmul * max(peak*shapeFactor(fm, fn, fk, c.eff.GEMMHalf), c.Node.GPU.FP32FLOPS)
	if cv, ok := c.Node.GPU.WeightGEMM[w]; ok {
		rate = c.eff.Matmul * cv.Peak * shapeFactor(fm, fn, fk, cv.Half)
	}
	wb := fn * fk * w.Size()
	ab := (fm*fk + fm*fn) * float64(c.actBytes)
	return kernel{
		compute: 2 * fm * fn * fk / rate,
		memory:  wb/(c.bw*c.weightEfficiency(wb)) + ab/(c.bw*c.eff.Memory),
	}
}

// weightEfficiency is the fraction of bandwidth at which a GEMM streams a
// weight shard of w bytes: Memory for shards much larger than L2, rising
// smoothly towards the full bandwidth as the shard shrinks below L2,
//
//	Memory + (1 − Memory) · L2 / (L2 + w).
//
// This is the shape dependence the Nitsum paper (papers/003, §2.2)
// measures and attributes to L2 hit rates: at small batches a rank's
// smaller weight shards load more efficiently, so higher TP gains per-GPU
// GEMM efficiency that a pure roofline does not see. It is bounded by the
// datasheet bandwidth, so it cannot make a GPU faster than its memory.
func (c *CostModel) weightEfficiency(w float64) float64 {
	l2 := c.Node.GPU.L2Bytes
	if !(l2 > 0) {
		return c.eff.Memory
	}
	return c.eff.Memory + (1-c.eff.Memory)*l2/(l2+w)
}

// GEMM returns the seconds of one GEMM out[m, n] = in[m, k]·w[n, k]ᵀ on
// one GPU, with w the weights' dtype and the activations in the cost
// model's precision. FP8 weights run at the FP8 peak where the GPU has FP8
// tensor cores (the per-step activation quantization kernel is separate:
// see Quantize) and at the 16-bit peak elsewhere (weight-only FP8).
func (c *CostModel) GEMM(m, n, k int, w DType) float64 {
	if m <= 0 || n <= 0 || k <= 0 {
		return 0
	}
	return c.gemm(m, n, k, w).time(c.eff.KernelLatency)
}

// GEMMEfficiency reports the achieved fraction of the GEMM's roofs: FLOPs
// over time at the dtype's dense peak, and bytes over time at the
// datasheet bandwidth, kernel latency included.
func (c *CostModel) GEMMEfficiency(m, n, k int, w DType) (compute, memory float64) {
	t := c.GEMM(m, n, k, w)
	if t == 0 {
		return 0, 0
	}
	peak := c.actPeak
	if w == FP8 && c.w8a8 {
		peak = c.fp8Peak
	}
	fm, fn, fk := float64(m), float64(n), float64(k)
	bytes := fn*fk*w.Size() + (fm*fk+fm*fn)*float64(c.actBytes)
	return 2 * fm * fn * fk / t / peak, bytes / t / c.bw
}

// streaming is a memory-bound kernel that moves bytes.
func (c *CostModel) streaming(bytes int64) kernel {
	return kernel{memory: float64(bytes) / (c.bw * c.eff.Memory)}
}

// Elementwise returns the seconds of one memory-bound kernel (a norm, a
// residual add, RoPE, SiLU·mul, a copy) that reads and writes bytes in
// total.
func (c *CostModel) Elementwise(bytes int64) float64 {
	if bytes <= 0 {
		return 0
	}
	return c.streaming(bytes).time(c.eff.KernelLatency)
}

// Quantize returns the seconds of the per-step FP8 quantization of an
// activation of elems elements (read in the activation dtype, written as
// FP8), which W8A8 GEMMs need before every projection; 0 when the GEMMs
// are not W8A8.
func (c *CostModel) Quantize(elems int) float64 {
	if !c.w8a8 || elems <= 0 {
		return 0
	}
	return c.Elementwise(int64(elems) * (c.actBytes + 1))
}

// AttentionWork is the attention of some query tokens over their
// sequences' keys, for one (query head, KV head) pair: it is additive over
// sequences.
type AttentionWork struct {
	Queries int64 // query tokens
	Pairs   int64 // (query, key) pairs attended (causal, within any sliding window)
	KVReads int64 // key-value tokens read from memory: once per query tile per sequence
}

// Add returns w + o.
func (w AttentionWork) Add(o AttentionWork) AttentionWork {
	return AttentionWork{w.Queries + o.Queries, w.Pairs + o.Pairs, w.KVReads + o.KVReads}
}

// SeqAttention is the attention work of tokens new tokens of a sequence
// at positions context … context+tokens−1 attending causally to every
// earlier key, or to the last window keys when window > 0. A prefill chunk
// reads its keys once per FlashQueryTile query rows; a decode (tokens = 1)
// reads them once.
func SeqAttention(context, tokens, window int) AttentionWork {
	if tokens <= 0 {
		return AttentionWork{}
	}
	c, n := int64(context), int64(tokens)
	// Σ over p = c … c+n−1 of keys(p) = p+1, capped at window.
	pairs := n*c + n*(n+1)/2
	keys := c + n
	if w := int64(window); w > 0 {
		pairs = 0
		if lo, hi := c, min(c+n, w); hi > lo { // positions p < w see p+1 keys
			pairs += (hi - lo) * (lo + 1 + hi) / 2
		}
		if capped := c + n - max(c, w); capped > 0 { // the rest see w
			pairs += capped * w
		}
		keys = min(keys, w+n-1)
	}
	tiles := (n + FlashQueryTile - 1) / FlashQueryTile
	return AttentionWork{Queries: n, Pairs: pairs, KVReads: keys * tiles}
}

// attention is the attention kernel of work for heads query heads reading
// kvHeads KV heads of headDim: 4·headDim FLOPs per pair and head (QKᵀ and
// PV) at the 16-bit peak times Attention (AttentionDecode for decode work
// where it is measured); the KV bytes read plus the queries read and
// outputs written at the streaming efficiency.
func (c *CostModel) attention(w AttentionWork, heads, kvHeads, headDim int, decode bool) kernel {
	if w.Queries == 0 {
		return kernel{}
	}
	d := float64(headDim)
	flops := 4 * d * float64(heads) * float64(w.Pairs)
	bytes := float64(kvHeads)*float64(w.KVReads)*2*d*float64(c.kvBytes) + 2*float64(w.Queries)*float64(heads)*d*float64(c.actBytes)
	eff := c.eff.Attention
	if decode && c.eff.AttentionDecode > 0 {
		eff = c.eff.AttentionDecode
	}
	return kernel{compute: flops / (c.actPeak * eff), memory: bytes / (c.bw * c.eff.Memory)}
}

// Attention returns the seconds of one FlashAttention kernel over work,
// for heads query heads reading kvHeads KV heads of headDim elements. Run
// prefill work and decode work (decode true) as two calls: prefill is
// bound by its FLOPs, decode by the KV bytes it reads.
func (c *CostModel) Attention(w AttentionWork, heads, kvHeads, headDim int, decode bool) float64 {
	if w.Queries == 0 {
		return 0
	}
	return c.attention(w, heads, kvHeads, headDim, decode).time(c.eff.KernelLatency)
}

// CollectiveSteps is the number of sequential algorithm steps of one
// collective over ranks members with the bandwidth-optimal algorithms
// package comm counts: ring all-reduce 2(P−1), ring all-gather and
// reduce-scatter P−1, pairwise all-to-all P−1, pipelined chain broadcast
// P−1, send/recv 1, barrier 2(P−1) (a zero-byte all-reduce).
func CollectiveSteps(kind comm.Kind, ranks int) int {
	if ranks <= 1 {
		return 0
	}
	switch kind {
	case comm.KindAllReduce, comm.KindBarrier:
		return 2 * (ranks - 1)
	case comm.KindSend, comm.KindRecv:
		return 1
	default:
		return ranks - 1
	}
}

// Collective returns the seconds of one collective of kind over ranks
// members of link, in which a member moves bytesPerRank bytes (the larger
// of the sent and received counts that package comm's volume functions
// give for it, which already carry the algorithm's factor, e.g.
// 2(P−1)/P·n for the ring all-reduce): a kernel latency, one hop latency
// per algorithm step, and the bytes at the link's effective bandwidth.
func (c *CostModel) Collective(kind comm.Kind, bytesPerRank int64, ranks int, link Link) float64 {
	if ranks <= 1 {
		return 0
	}
	t := c.eff.KernelLatency + float64(CollectiveSteps(kind, ranks))*link.HopLatency
	if bytesPerRank > 0 {
		t += float64(bytesPerRank) / (link.BytesPerS * link.Efficiency)
	}
	return t
}

// HostCopy returns the seconds of one host↔device copy of bytes over one
// GPU's host link (Node.Host: pinned memory, one direction, at
// LinkEfficiency of the link's bandwidth, plus a kernel latency), the
// transfers of Seesaw's KV tier and weight reloads, SiDP's weight fetches
// and Nitsum's KV migration through the host. Each GPU has its own host
// link, so the GPUs of a node copy in parallel. A copy runs on the GPU's
// copy engine, a resource apart from its compute: nothing here charges
// it to a step, and whether it overlaps compute (or serializes with it, or
// contends with PCIe collectives on the same link) is the caller's
// decision. On a profiled CPU it is a memory copy.
func (c *CostModel) HostCopy(bytes int64) float64 {
	if bytes <= 0 {
		return 0
	}
	return c.eff.KernelLatency + float64(bytes)/c.hostBytes
}

// checkRank validates rank r of placement l for cfg on the cost model's
// node.
func (c *CostModel) checkRank(cfg *model.Config, l parallel.Placement, r int) error {
	if err := l.Plan.Validate(cfg); err != nil {
		return fmt.Errorf("sim: placement %s: %w", l, err)
	}
	if len(l.Coords) != l.Plan.Ranks() {
		return fmt.Errorf("sim: placement %s has %d ranks, its plan %d", l, len(l.Coords), l.Plan.Ranks())
	}
	if l.Plan.Ranks() > c.Node.Count {
		return fmt.Errorf("sim: placement %s needs %d GPUs, node %s has %d", l, l.Plan.Ranks(), c.Node, c.Node.Count)
	}
	if r < 0 || r >= len(l.Coords) {
		return fmt.Errorf("sim: rank %d outside placement %s's %d ranks", r, l, len(l.Coords))
	}
	return nil
}

// WeightReload returns the seconds to copy global rank r's weight shard
// under placement l from host memory onto its GPU: the bytes the memory
// model gives the shard (Memory's Weights for l: linear layers in the
// weight dtype, the rest in the activation dtype) as one HostCopy over the
// rank's host link. It is what Seesaw pays per GPU to re-shard its weights
// from the host copy when it switches between its prefill and decode
// layouts; every rank reloads in parallel over its own link, so a switch
// takes the largest of its ranks'. Like HostCopy it runs on the copy
// engine: whether it blocks or overlaps compute is the caller's decision.
func (c *CostModel) WeightReload(cfg *model.Config, l parallel.Placement, r int) (float64, error) {
	if err := c.checkRank(cfg, l, r); err != nil {
		return 0, err
	}
	return c.HostCopy(c.weightBytes(cfg, l, r)), nil
}

// KVSwap returns the seconds to move tokens tokens of global rank r's KV
// slice under placement l between host and device memory, in either
// direction: the keys and values of the rank's KV heads in its stage's
// layers (Placement.KVElemsPerToken) in the KV dtype, as one HostCopy over
// the rank's host link. Seesaw swaps a sequence out under its prefill
// layout and in under its decode layout, so each direction is priced with
// its own placement. A swap of many sequences is one call with their
// tokens summed (one latency) or one call each. Like HostCopy it runs on
// the copy engine, apart from compute; overlap is the caller's decision,
// and a host-side staging copy (pinned to shared memory) is not included.
func (c *CostModel) KVSwap(cfg *model.Config, l parallel.Placement, r int, tokens int64) (float64, error) {
	if err := c.checkRank(cfg, l, r); err != nil {
		return 0, err
	}
	if tokens < 0 {
		return 0, fmt.Errorf("sim: KV swap of %d tokens", tokens)
	}
	return c.HostCopy(tokens * l.KVElemsPerToken(cfg, r) * c.kvBytes), nil
}
