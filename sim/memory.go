package sim

import (
	"fmt"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// GPUMemoryUtilization is the fraction of a GPU's memory the engine may
// use for weights, activations and the KV cache: vLLM's
// --gpu-memory-utilization default, 0.9. The rest covers the CUDA
// context, NCCL buffers, CUDA graphs and fragmentation.
const GPUMemoryUtilization = 0.9

// MemoryOptions are the engine settings the memory budget depends on.
type MemoryOptions struct {
	// Also are placements whose weights every rank holds besides the
	// base's (Shift Parallelism's shift placement: its separate model).
	Also             []parallel.Placement
	MaxBatchedTokens int // tokens per step (--max-num-batched-tokens); 0 means 2048, gearbox serve's default
	MaxSeqs          int // sequences per step (--max-num-seqs), the logits rows; 0 means 256, vLLM's and gearbox serve's default
	// Utilization is the fraction of the GPU's memory the engine may use
	// (--gpu-memory-utilization); 0 means GPUMemoryUtilization.
	Utilization float64
}

func (o MemoryOptions) withDefaults() MemoryOptions {
	if o.MaxBatchedTokens == 0 {
		o.MaxBatchedTokens = 2048
	}
	if o.MaxSeqs == 0 {
		o.MaxSeqs = 256
	}
	if o.Utilization == 0 {
		o.Utilization = GPUMemoryUtilization
	}
	return o
}

// Memory is one rank's memory budget, bytes.
type Memory struct {
	Capacity        int64 // the GPU's memory
	Usable          int64 // MemoryOptions.Utilization of it
	Weights         int64 // the rank's weights under the base placement
	AlsoWeights     int64 // the shards of MemoryOptions.Also (Shift's separate model); 0 without
	Activations     int64 // the largest step's live activations, reserved as vLLM's profiling run does
	KV              int64 // what is left for the KV cache; never negative
	KVBytesPerToken int64 // KV bytes this rank stores per token of its replica
	KVTokens        int64 // KV / KVBytesPerToken: tokens of its replica the rank can hold
}

// Fits reports whether the weights and activations fit at all.
func (m Memory) Fits() bool { return m.Weights+m.AlsoWeights+m.Activations <= m.Usable }

// weightBytes is the weight memory of rank r under l: the linear layers'
// elements in the weight dtype and the rest (embedding, LM head, norms,
// biases: what WeightElems counts beyond them) in the activation dtype,
// as vLLM's --quantization fp8 stores them, or with HeadInWeights the
// embedding and LM head in the weight dtype too (the CPU engine; its
// norms and biases are float32, its activation dtype).
func (c *CostModel) weightBytes(cfg *model.Config, l parallel.Placement, r int) int64 {
	p, co := l.Plan, l.Coords[r]
	h, d := int64(cfg.Hidden), int64(cfg.HeadDim)
	slice := parallel.SliceHeads(cfg, co.TP, p.SP, p.TP)
	q, kv := int64(slice.QHi-slice.QLo)*d, int64(slice.KVHi-slice.KVLo)*d
	inter := int64(parallel.Even(cfg.Intermediate, p.TP, co.TP).Len())
	layers := int64(p.Stage(co.PP, cfg.Layers).Len())
	ffnLayers := layers
	if l.FFN.Pooled() { // SiDP: only the owned layers' gate, up and down
		ffnLayers = int64(l.OwnedFFNLayers(cfg, r))
	}
	linear := layers*((q+2*kv)*h+h*q) + ffnLayers*3*inter*h
	if c.Precision.HeadInWeights {
		vocab := int64(parallel.Even(cfg.Vocab, p.TP, co.TP).Len())
		first, last := co.PP == 0, co.PP == p.PP-1
		if first {
			linear += vocab * h
		}
		if last && (!cfg.TieWordEmbeddings || !first) {
			linear += vocab * h
		}
	}
	return int64(float64(linear)*c.wgtDType.Size()) + (l.WeightElems(cfg, r)-linear)*c.actBytes
}

// Memory returns global rank r's memory budget when the model runs under
// base (and also holds the weights of opts.Also, as the engine does). The activation reserve is the engine's live scratch
// for a step of opts.MaxBatchedTokens tokens on the rank: the residual
// stream, its normed copy and the partial sums (3·hidden per row), q, k
// and v of the slice and the attention output, gate and up of the
// intermediate slice, the SP all-to-all buffers, and float32 logits (the
// vocabulary slice and the gathered vocabulary) for opts.MaxSeqs rows.
func (c *CostModel) Memory(cfg *model.Config, base parallel.Plan, r int, opts MemoryOptions) (Memory, error) {
	opts = opts.withDefaults()
	if err := base.Validate(cfg); err != nil {
		return Memory{}, err
	}
	if base.Ranks() > c.Node.Count {
		return Memory{}, fmt.Errorf("sim: plan %s needs %d GPUs, node %s has %d", base, base.Ranks(), c.Node, c.Node.Count)
	}
	if r < 0 || r >= base.Ranks() {
		return Memory{}, fmt.Errorf("sim: rank %d outside plan %s's %d ranks", r, base, base.Ranks())
	}
	if !(opts.Utilization > 0 && opts.Utilization <= 1) {
		return Memory{}, fmt.Errorf("sim: GPU memory utilization %g outside (0, 1]", opts.Utilization)
	}
	if opts.MaxBatchedTokens < 1 || opts.MaxSeqs < 1 {
		return Memory{}, fmt.Errorf("sim: max batched tokens %d and max sequences %d must be positive", opts.MaxBatchedTokens, opts.MaxSeqs)
	}
	l := parallel.Standard(base)
	m := Memory{Capacity: c.Node.GPU.MemoryBytes}
	m.Usable = int64(opts.Utilization * float64(m.Capacity))
	m.Weights = c.weightBytes(cfg, l, r)
	acts := c.activationBytes(cfg, l, r, opts)
	for _, o := range opts.Also {
		if o.Name == l.Name {
			continue
		}
		if err := o.Plan.Validate(cfg); err != nil {
			return Memory{}, fmt.Errorf("sim: placement %s: %w", o, err)
		}
		if len(o.Coords) != len(l.Coords) {
			return Memory{}, fmt.Errorf("sim: placement %s has %d ranks, %s %d", o, len(o.Coords), l, len(l.Coords))
		}
		m.AlsoWeights += c.weightBytes(cfg, o, r)
		acts = max(acts, c.activationBytes(cfg, o, r, opts))
	}
	m.Activations = acts
	m.KVBytesPerToken = l.KVElemsPerToken(cfg, r) * c.kvBytes
	m.KV = max(0, m.Usable-m.Weights-m.AlsoWeights-m.Activations)
	if m.KVBytesPerToken > 0 {
		m.KVTokens = m.KV / m.KVBytesPerToken
	}
	return m, nil
}

// activationBytes is rank r's live scratch for the largest step of opts
// under l (see Memory).
func (c *CostModel) activationBytes(cfg *model.Config, l parallel.Placement, r int, opts MemoryOptions) int64 {
	tokens := opts.MaxBatchedTokens
	p, co := l.Plan, l.Coords[r]
	d := cfg.HeadDim
	slice := parallel.SliceHeads(cfg, co.TP, p.SP, p.TP)
	chunk := parallel.ChunkHeads(cfg, p.HeadChunk(co), p.HeadShards())
	qs, ks := (slice.QHi-slice.QLo)*d, (slice.KVHi-slice.KVLo)*d
	qc, kc := (chunk.QHi-chunk.QLo)*d, (chunk.KVHi-chunk.KVLo)*d
	inter := parallel.Even(cfg.Intermediate, p.TP, co.TP).Len()
	nl := int64((tokens + p.SP - 1) / p.SP)
	n := nl * int64(p.SP)
	perRow := int64(3*cfg.Hidden + 2*qs + 2*ks + 2*inter)
	elems := nl*perRow + n*int64(qc) // attention of the chunk for every token
	if p.SP > 1 {
		elems += 2*n*int64(qc+2*kc) + n*int64(qc) // all-to-all send, receive and return buffers
	}
	logits := int64(min(opts.MaxSeqs, tokens)) * int64(parallel.Even(cfg.Vocab, p.TP, co.TP).Len()+cfg.Vocab) * 4
	return elems*c.actBytes + logits
}

// KVCapacity returns the KV tokens each data-parallel replica can hold
// under base: the smallest KVTokens over the replica's ranks, since every
// rank of a replica stores every token (its head chunk and layers of it).
func (c *CostModel) KVCapacity(cfg *model.Config, base parallel.Plan, opts MemoryOptions) ([]int64, error) {
	out := make([]int64, base.DP)
	for d := range out {
		out[d] = -1
	}
	for r := 0; r < base.Ranks(); r++ {
		m, err := c.Memory(cfg, base, r, opts)
		if err != nil {
			return nil, err
		}
		d := base.Coord(r).DP
		if out[d] < 0 || m.KVTokens < out[d] {
			out[d] = m.KVTokens
		}
	}
	return out, nil
}
