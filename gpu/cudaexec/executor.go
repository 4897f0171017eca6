package cudaexec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/gpu"
	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// Options configure an Executor.
type Options struct {
	Device int         // CUDA device ordinal
	DType  model.DType // weights and activations; DTypeAuto resolves with Config.ResolveDType
	// Placements are the placements the executor runs, the KV cache laid
	// out under the first, all with the same ranks, which share the one
	// device. The weights of those sharing the KV cache's slices
	// (parallel.Placement.SharesKV) are resident; a placement that does
	// not share them is reached by Transition, which re-shards the weights
	// from the host copy (Seesaw; see seesaw.go). Empty means Plan's
	// standard placement. DP is not supported.
	Placements []parallel.Placement
	Plan       parallel.Plan // shorthand when Placements is empty; the zero value is one rank
	BlockSize  int           // KV block size in tokens; default 16
	// NumBlocks is the KV block count; 0 sizes the pool from
	// MemoryUtilization.
	NumBlocks int
	// MemoryUtilization is the fraction of the device's memory the
	// executor may use in all (vLLM's --gpu-memory-utilization); default 0.9.
	MemoryUtilization float64
	MaxNumTokens      int // most tokens in one step (--max-num-batched-tokens); default 8192
	MaxNumSeqs        int // most sequences in one step; default 256
	MaxModelLen       int // longest sequence; default the model's context length
	// EnforceEager disables CUDA graphs (vLLM's --enforce-eager).
	EnforceEager bool
	// HostBlocks is the host KV store (Seesaw's CPU tier, engine.Swapper)
	// in blocks of the whole model's keys and values; 0 for none.
	HostBlocks int
	// KernelCache holds compiled kernels; nil compiles at every start.
	KernelCache *gpu.KernelCache
	Logger      *slog.Logger // default slog.Default()
}

// Info describes a loaded executor for logs and `gearbox inspect`.
type Info struct {
	Device       string // e.g. "NVIDIA H100 80GB HBM3 (sm_90, driver 13000)"
	DType        model.DType
	TotalMemory  int64
	WeightBytes  int64 // all ranks and layouts
	KVBytes      int64 // all ranks
	KVBlocks     int
	KVTokens     int // KVBlocks · BlockSize
	Buckets      Buckets
	MaxNumTokens int
	// Start-up: loading (or compiling) the kernels, and uploading the
	// weights from the host.
	KernelTime, WeightTime time.Duration
}

// Executor runs steps of a Llama-family model on one CUDA device: weights
// resident in the chosen dtype, GEMMs through cuBLAS with FP32
// accumulation, fused kernels for the rest, attention over a paged KV
// cache with the CPU engine's block layout, and decode steps replayed from
// CUDA graphs captured per batch-size bucket.
//
// A multi-rank plan runs its ranks on the one device, each with its own
// weight shard, KV cache and buffers, exactly as the CPU executor shards
// them (parallel.NewShard); collectives become device copies and a
// reduction kernel on one stream, and are counted with the CPU's byte
// accounting. That makes every plan and Shift switch testable on a single
// GPU. Every device call runs on the context's pinned worker thread
// (cuda.Context.Do). An Executor is not safe for concurrent use, except
// that SwapIn and SwapOut may run beside Step (swap.go).
type Executor struct {
	cfg  *model.Config
	opts Options
	log  *slog.Logger
	ctx  *cuda.Context
	blas *cuda.BLAS
	ops  devOps   // allocation, copies, GEMMs and attention on the stream
	k    *Kernels // dtype kernels
	k32  *Kernels // float32 kernels, for the float32 residual's reductions
	dt   model.DType
	s    cuda.Stream

	base    parallel.Placement    // the KV cache's placement
	layouts map[string]*devLayout // the resident weights, by placement name
	maxSP   int                   // the largest SP degree of the placements: the metadata's row tables
	ranks   []*devRank
	kv      kvcache.Layout // rank 0's; every rank has the same block count
	cos     cuda.DevicePtr // float32 [maxModelLen, headDim/2]
	sin     cuda.DevicePtr
	cap     capacity
	meta    cuda.DevicePtr // int32 tables, laid out by metaLayout
	work    cuda.DevicePtr // attention workspace, shared by the ranks
	bwork   cuda.DevicePtr // cuBLAS workspace

	buckets Buckets
	graphs  map[graphKey]cuda.GraphExec
	// graphStats is the collective traffic one replay of a graph stands
	// for, counted when it was captured.
	graphStats map[graphKey]comm.Stats
	info       Info
	steps      map[string]int
	stepsMu    sync.Mutex       // guards steps: PlanSteps may run beside a step (an engine's Stats, /metrics)
	world      *comm.World      // counts every collective (Group.Drive); replaced after a failure
	replayed   comm.Stats       // traffic of graph replays and of replaced worlds, less captures
	out        []float32        // [rows, vocab] host logits of the last step, in outBuf
	outBuf     hostBuf[float32] // page-locked on a device
	partBuf    hostBuf[float32] // host staging of one rank's logits slice
	hid        []float32        // [rows, hidden] final-norm rows of the last step, when its batch asked (Batch.Hidden)
	hidBuf     hostBuf[byte]    // host staging of one rank's final-norm rows
	upStages   [2]hostBuf[byte] // the uploader's stages (upload.go), page-locked on a device
	pool       *tensor.Pool     // the host's share of uploads and swaps: packing and copying stages
	wantHidden bool             // the step in progress reads hid
	tokens     []int            // [rows] argmax of the last greedy step
	ids        []int32          // host staging of one rank's argmax rows
	host       []int32          // host staging of the step's int32 tables
	allocs     map[cuda.DevicePtr]bool
	closed     bool
	seesaw     // host weight copy, host KV store and transitions (seesaw.go)
}

var _ engine.GreedyRunner = (*Executor)(nil)

// devLayout is one placement's device shards, by global rank.
type devLayout struct {
	layout parallel.Placement
	shards []*devShard
}

// devShard is one rank's weights on the device under one layout. q/k/v and
// gate/up are fused into one matrix each (rows concatenated) so each runs
// as one GEMM; absent optional tensors are 0.
type devShard struct {
	spans                 *parallel.Shard // heads, columns, vocabulary and layers
	embed, norm, lmHead   cuda.DevicePtr
	layers                []layerWeights
	sliceW, chunkW        int // fused q|k|v widths of the slice and of the chunk, in elements
	qs, ks, qc, kc, inter int // slice and chunk q and kv widths; MLP columns
}

type layerWeights struct {
	attnNorm, mlpNorm cuda.DevicePtr
	qkv               cuda.DevicePtr // [slice q|k|v rows, hidden]
	qkvBias           cuda.DevicePtr // [chunk q|k|v], laid out as the attention input after the SP all-to-all
	qNorm, kNorm      cuda.DevicePtr
	o, oBias          cuda.DevicePtr // [hidden, slice q], [hidden]
	gateUp, guBias    cuda.DevicePtr // [2·inter, hidden], [2·inter]
	down, downBias    cuda.DevicePtr // [hidden, inter], [hidden]
}

// devRank is one rank's KV cache and step buffers. Buffers are sized for
// the whole model so any layout's shard fits; their addresses are fixed
// so CUDA graphs can replay them.
type devRank struct {
	id          int
	x           cuda.DevicePtr // float32 [tokens, hidden] residual stream
	xn          cuda.DevicePtr // [tokens, hidden] normalised
	qkv         cuda.DevicePtr // [tokens, q|k|v] projections of this rank's rows
	recv        cuda.DevicePtr // [tokens, chunk q|k|v] every token's chunk heads (SP); qkv without SP
	q, attnC    cuda.DevicePtr // [tokens, chunk q] rotated queries, attention output
	attn        cuda.DevicePtr // [tokens, slice q] this rank's rows' attention (SP); attnC without SP
	delta       cuda.DevicePtr // [tokens, hidden] o_proj / down_proj output
	gateUp, mlp cuda.DevicePtr // [tokens, 2·inter], [tokens, inter]
	hl          cuda.DevicePtr // [logit rows, hidden]
	logits      cuda.DevicePtr // float32 [logit rows, vocab]
	argmax      cuda.DevicePtr // int32 [logit rows]

	// kLayers and vLayers are the keys and values of each local layer,
	// one allocation each of [blocks, kv heads, block size, head dim], so
	// that a transition can re-lay the cache out a layer at a time.
	kLayers, vLayers []cuda.DevicePtr
}

// layerCache is the start of local layer li's keys and values.
func (rk *devRank) layerCache(li int) (k, v cuda.DevicePtr) {
	return rk.kLayers[li], rk.vLayers[li]
}

// capacity is what the step buffers hold.
type capacity struct {
	tokens, seqs, logitRows int
	maxBlocks               int // block-table row stride of graph steps
}

type graphKey struct {
	placement string
	bucket    int
}

const blasWorkspace = 32 << 20 // set explicitly so graph capture works

// New opens the device, compiles the kernels, uploads w in the chosen dtype
// for every rank of every placement in Options, allocates the buffers
// and sizes the KV pool. The caller must Close the executor.
func New(cfg *model.Config, w *model.Weights, opts Options) (*Executor, error) {
	if err := fillDefaults(cfg, &opts); err != nil {
		return nil, err
	}
	for _, m := range w.Matrices() {
		if m.DType() == tensor.Q8_0 {
			return nil, fmt.Errorf("cudaexec: the weights are quantized to Q8_0 (--quantization int8), which runs on the CPU only; load the model without quantization for the GPU")
		}
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		return nil, fmt.Errorf("cudaexec: %w", err)
	}
	dctx, err := cuda.Open(opts.Device)
	if err != nil {
		return nil, fmt.Errorf("cudaexec: %w", err)
	}
	e := &Executor{
		cfg: cfg, opts: opts, log: opts.Logger, ctx: dctx, dt: cfg.ResolveDType(opts.DType),
		base: opts.Placements[0], layouts: map[string]*devLayout{},
		graphs: map[graphKey]cuda.GraphExec{}, steps: map[string]int{}, replayed: comm.Stats{},
		allocs: map[cuda.DevicePtr]bool{}, pool: tensor.NewPool(min(runtime.GOMAXPROCS(0), 8)),
	}
	e.ops = cudaOps{e}
	if !opts.EnforceEager {
		e.buckets = VLLMBuckets(min(2*opts.MaxNumSeqs, DefaultMaxGraphBatch, opts.MaxNumTokens))
	}
	if err := e.initHost(w); err != nil {
		return nil, errors.Join(err, dctx.Close())
	}
	if err := dctx.Do(func() error { return e.load(w, nv) }); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	e.log.Info("cuda executor ready", "device", e.info.Device, "dtype", e.dt.String(), "placements", fmt.Sprint(opts.Placements),
		"weights_gib", float64(e.info.WeightBytes)/(1<<30), "kv_blocks", e.info.KVBlocks,
		"kv_tokens", e.info.KVTokens, "host_kv_blocks", opts.HostBlocks, "graph_buckets", len(e.buckets),
		"kernels_seconds", e.info.KernelTime.Seconds(), "weights_seconds", e.info.WeightTime.Seconds())
	return e, nil
}

func fillDefaults(cfg *model.Config, o *Options) error {
	if len(o.Placements) == 0 {
		if o.Plan == (parallel.Plan{}) {
			o.Plan = parallel.Single
		}
		o.Placements = []parallel.Placement{parallel.Standard(o.Plan)}
	}
	names := map[string]bool{}
	for _, p := range o.Placements {
		if err := p.Plan.Validate(cfg); err != nil {
			return err
		}
		if p.Plan.DP > 1 {
			return fmt.Errorf("cudaexec: placement %s: data parallelism on one GPU is not supported (run one server per replica)", p)
		}
		if names[p.Name] {
			return fmt.Errorf("cudaexec: two placements are named %q", p.Name)
		}
		names[p.Name] = true
		if first := o.Placements[0]; len(p.Coords) != len(first.Coords) {
			return fmt.Errorf("cudaexec: placement %s: every placement must run the %d ranks of %s", p, len(first.Coords), first)
		}
	}
	if o.BlockSize == 0 {
		o.BlockSize = 16
	}
	if o.BlockSize <= 0 || o.BlockSize > kvcache.MaxBlockSize {
		return fmt.Errorf("cudaexec: block size %d outside [1, %d]", o.BlockSize, kvcache.MaxBlockSize)
	}
	if o.MemoryUtilization == 0 {
		o.MemoryUtilization = 0.9
	}
	if o.MemoryUtilization <= 0 || o.MemoryUtilization > 1 {
		return fmt.Errorf("cudaexec: gpu memory utilization %g outside (0, 1]", o.MemoryUtilization)
	}
	if o.MaxNumTokens == 0 {
		o.MaxNumTokens = 8192
	}
	if o.MaxNumSeqs == 0 {
		o.MaxNumSeqs = 256
	}
	if o.MaxModelLen == 0 || o.MaxModelLen > cfg.MaxPositions {
		o.MaxModelLen = cfg.MaxPositions
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HostBlocks < 0 {
		return fmt.Errorf("cudaexec: %d host KV blocks", o.HostBlocks)
	}
	if cfg.HeadDim%2 != 0 || cfg.HeadDim > 256 {
		return fmt.Errorf("cudaexec: head_dim %d unsupported (want even, at most 256)", cfg.HeadDim)
	}
	return nil
}

// load runs on the device thread.
func (e *Executor) load(w *model.Weights, nv *cuda.NVRTC) error {
	c := e.ctx
	var err error
	if e.s, err = c.NewStream(); err != nil {
		return err
	}
	if e.blas, err = c.NewBLAS(); err != nil {
		return err
	}
	if err := e.blas.SetStream(e.s); err != nil {
		return err
	}
	start := time.Now()
	if e.k, err = LoadKernels(c, nv, e.opts.KernelCache, e.dt); err != nil {
		return err
	}
	e.k32 = e.k
	if e.dt != model.Float32 {
		if e.k32, err = LoadKernels(c, nv, e.opts.KernelCache, model.Float32); err != nil {
			return err
		}
	}
	kernelTime := time.Since(start)
	start = time.Now()
	up := e.newUploader()
	if err := errors.Join(e.loadShards(w, up.put), up.finish()); err != nil {
		return fmt.Errorf("cudaexec: weights: %w", err)
	}
	weightTime := time.Since(start)
	if e.bwork, err = e.alloc(blasWorkspace); err != nil {
		return err
	}
	if err := e.blas.SetWorkspace(e.bwork, blasWorkspace); err != nil {
		return err
	}
	if err := e.prepare(); err != nil {
		return err
	}

	// KV pool: what the utilization budget leaves after everything above,
	// less a reserve for CUDA graphs and the driver's own allocations.
	free, total, err := c.MemInfo()
	if err != nil {
		return err
	}
	perBlock := e.kvBlockBytes(e.base) // bytes of one block over every rank and layer, K and V
	blocks := e.opts.NumBlocks
	if blocks == 0 {
		const reserve = 512 << 20
		budget := int64(e.opts.MemoryUtilization*float64(total)) - (total - free) - reserve
		// Room for a transition: the largest weights and KV pool of any
		// placement, and one layer's new KV beside the old (seesaw.go).
		extra, most := e.transitionRoom(up.bytes)
		budget -= extra
		blocks = int(budget / most)
		if need := ceilDiv(e.opts.MaxModelLen, e.opts.BlockSize); blocks < need {
			return fmt.Errorf("cudaexec: %.2f GiB left for the KV cache under --gpu-memory-utilization %g holds %d blocks of %d tokens, fewer than one %d-token sequence needs (%d); raise the utilization or lower --max-model-len",
				float64(max(budget, 0))/(1<<30), e.opts.MemoryUtilization, max(blocks, 0), e.opts.BlockSize, e.opts.MaxModelLen, need)
		}
	}
	if err := e.allocKV(blocks); err != nil {
		return err
	}
	e.info = Info{
		Device: fmt.Sprintf("%s (%s, driver %d)", c.Name(), c.Capability().Arch(), c.DriverVersion()),
		DType:  e.dt, TotalMemory: total, WeightBytes: up.bytes, KVBytes: perBlock * int64(blocks),
		KVBlocks: blocks, KVTokens: blocks * e.opts.BlockSize, Buckets: e.buckets, MaxNumTokens: e.opts.MaxNumTokens,
		KernelTime: kernelTime, WeightTime: weightTime,
	}
	return nil
}

// loadShards cuts w into every rank's shard under each placement and
// writes each with put.
func (e *Executor) loadShards(w *model.Weights, put func(parts ...*tensor.Weights) cuda.DevicePtr) error {
	cfg := e.cfg
	for _, l := range e.opts.Placements {
		e.maxSP = max(e.maxSP, l.Plan.SP)
		if !e.resident(l) {
			continue // uploaded by a transition to it
		}
		dl := &devLayout{layout: l}
		for r := range l.Coords {
			dl.shards = append(dl.shards, newDevShard(parallel.NewShard(e.pool, cfg, w, l, r), cfg.HeadDim, put))
		}
		e.layouts[l.Name] = dl
	}
	return nil
}

// prepare makes the ranks, the RoPE tables and the step buffers.
func (e *Executor) prepare() error {
	if err := e.ropeTables(); err != nil {
		return err
	}
	for r := range e.base.Coords {
		e.ranks = append(e.ranks, &devRank{id: r})
	}
	return e.allocBuffers(capacity{tokens: e.opts.MaxNumTokens, seqs: e.opts.MaxNumSeqs, logitRows: e.opts.MaxNumSeqs,
		maxBlocks: ceilDiv(e.opts.MaxModelLen, e.opts.BlockSize)})
}

// allocKV allocates every rank's KV cache of blocks blocks, one
// allocation per local layer for the keys and one for the values.
func (e *Executor) allocKV(blocks int) error {
	e.kv = e.rankLayout(e.base, 0, blocks)
	for r, rk := range e.ranks {
		s := e.base.KVSlice(e.cfg, r)
		for range s.Layers.Len() {
			k, v, err := e.allocLayerKV(s, blocks)
			if err != nil {
				return err
			}
			rk.kLayers, rk.vLayers = append(rk.kLayers, k), append(rk.vLayers, v)
		}
	}
	return nil
}

func (e *Executor) alloc(bytes int64) (cuda.DevicePtr, error) {
	p, err := e.ops.alloc(max(bytes, 256))
	if err != nil {
		return 0, err
	}
	e.allocs[p] = true
	return p, nil
}

func (e *Executor) free(p cuda.DevicePtr) error {
	if p == 0 || !e.allocs[p] {
		return nil
	}
	delete(e.allocs, p)
	return e.ops.free(p)
}

// newDevShard writes one rank's weights with put, q/k/v and gate/up fused.
func newDevShard(sh *parallel.Shard, d int, put func(parts ...*tensor.Weights) cuda.DevicePtr) *devShard {
	ds := &devShard{spans: sh}
	ds.qs, ds.ks = (sh.Slice.QHi-sh.Slice.QLo)*d, (sh.Slice.KVHi-sh.Slice.KVLo)*d
	ds.qc, ds.kc = (sh.Chunk.QHi-sh.Chunk.QLo)*d, (sh.Chunk.KVHi-sh.Chunk.KVLo)*d
	ds.sliceW, ds.chunkW, ds.inter = ds.qs+2*ds.ks, ds.qc+2*ds.kc, sh.Inter.Len()
	ds.embed = put(sh.Embed)
	ds.norm = put(vec(sh.Norm))
	ds.lmHead = ds.embed
	if sh.LMHead != nil && sh.LMHead != sh.Embed {
		ds.lmHead = put(sh.LMHead)
	}
	// The chunk's part of the slice's q, k and v biases, in the order the
	// chunk's heads sit after the all-to-all.
	qo, ko := (sh.Chunk.QLo-sh.Slice.QLo)*d, (sh.Chunk.KVLo-sh.Slice.KVLo)*d
	part := func(b []float32, off, n int) *tensor.Weights {
		if b == nil {
			return nil
		}
		return vec(b[off : off+n])
	}
	for _, l := range sh.Layers {
		ds.layers = append(ds.layers, layerWeights{
			attnNorm: put(vec(l.AttnNorm)), mlpNorm: put(vec(l.MLPNorm)),
			qkv:     put(l.WQ, l.WK, l.WV),
			qkvBias: put(part(l.BQ, qo, ds.qc), part(l.BK, ko, ds.kc), part(l.BV, ko, ds.kc)),
			qNorm:   put(vec(l.QNorm)), kNorm: put(vec(l.KNorm)),
			o: put(l.WO), oBias: put(vec(l.BO)),
			gateUp: put(l.WGate, l.WUp), guBias: put(vec(l.BGate), vec(l.BUp)),
			down: put(l.WDown), downBias: put(vec(l.BDown)),
		})
	}
	return ds
}

// vec is a host vector (a norm's or a bias's float32 values) as a one-row
// matrix for the uploader; nil when it is empty.
func vec(v []float32) *tensor.Weights {
	if len(v) == 0 {
		return nil
	}
	return tensor.NewWeightsF32(v, 1, len(v))
}

// ropeTables uploads cos and sin of every position and rotary pair,
// computed in float64 from the model's (scaled) inverse frequencies as the
// CPU engine does.
func (e *Executor) ropeTables() error {
	inv := e.cfg.InvFreq()
	half, n := len(inv), e.opts.MaxModelLen
	cos, sin := make([]float32, n*half), make([]float32, n*half)
	for p := 0; p < n; p++ {
		for j, f := range inv {
			s, c := math.Sincos(float64(p) * f)
			cos[p*half+j], sin[p*half+j] = float32(c), float32(s)
		}
	}
	var err error
	if e.cos, err = e.alloc(4 * int64(len(cos))); err != nil {
		return err
	}
	if e.sin, err = e.alloc(4 * int64(len(sin))); err != nil {
		return err
	}
	if err := e.ops.toDevice(e.cos, unsafe.Pointer(&cos[0]), 4*int64(len(cos))); err != nil {
		return err
	}
	if err := e.ops.toDevice(e.sin, unsafe.Pointer(&sin[0]), 4*int64(len(sin))); err != nil {
		return err
	}
	return e.ops.sync()
}

// allocBuffers (re)sizes every rank's step buffers and the shared tables
// for c, dropping captured graphs (they point at the old buffers).
func (e *Executor) allocBuffers(c capacity) error {
	if err := e.dropGraphs(); err != nil {
		return err
	}
	cfg, elem := e.cfg, int64(e.dt.Size())
	sp := e.maxSP
	t := int64(c.tokens + sp) // SP pads the micro-batch to a multiple of SP
	h, qd := int64(cfg.Hidden), int64(cfg.QDim())
	wqkv, inter := int64(cfg.QDim()+2*cfg.KVDim()), int64(cfg.Intermediate)
	rows := int64(c.logitRows)
	for _, rk := range e.ranks {
		bufs := []struct {
			dst   *cuda.DevicePtr
			bytes int64
		}{
			{&rk.x, 4 * t * h}, {&rk.xn, elem * t * h}, {&rk.qkv, elem * t * wqkv}, {&rk.q, elem * t * qd},
			{&rk.attnC, elem * t * qd}, {&rk.delta, elem * t * h}, {&rk.gateUp, elem * t * 2 * inter},
			{&rk.mlp, elem * t * inter}, {&rk.hl, elem * rows * h}, {&rk.logits, 4 * rows * int64(cfg.Vocab)},
			{&rk.argmax, 4 * rows},
		}
		if sp > 1 {
			bufs = append(bufs, struct {
				dst   *cuda.DevicePtr
				bytes int64
			}{&rk.recv, elem * t * wqkv}, struct {
				dst   *cuda.DevicePtr
				bytes int64
			}{&rk.attn, elem * t * qd})
		}
		for _, b := range bufs {
			if err := e.free(*b.dst); err != nil {
				return err
			}
			p, err := e.alloc(b.bytes)
			if err != nil {
				return fmt.Errorf("cudaexec: buffers for %d tokens: %w", c.tokens, err)
			}
			*b.dst = p
		}
		if sp == 1 {
			rk.recv, rk.attn = rk.qkv, rk.attnC
		}
	}
	for _, p := range []*cuda.DevicePtr{&e.meta, &e.work} {
		if err := e.free(*p); err != nil {
			return err
		}
	}
	var err error
	if e.meta, err = e.alloc(4 * int64(newMetaLayout(c, sp).size)); err != nil {
		return err
	}
	if e.work, err = e.alloc(AttnWorkspaceBytes(c.seqs+sp, cfg.Heads, cfg.HeadDim)); err != nil {
		return err
	}
	e.cap = c
	return nil
}

func (e *Executor) dropGraphs() error {
	var errs []error
	for key, g := range e.graphs {
		errs = append(errs, e.ctx.DestroyGraphExec(g))
		delete(e.graphs, key)
	}
	return errors.Join(errs...)
}

// Close frees the device memory, graphs and handles and releases the
// context. It is safe to call more than once.
func (e *Executor) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	err := e.ctx.Do(func() error {
		errs := []error{e.dropGraphs()}
		if e.blas != nil {
			errs = append(errs, e.blas.Close())
		}
		if e.k32 != nil && e.k32 != e.k {
			errs = append(errs, e.k32.Close())
		}
		if e.k != nil {
			errs = append(errs, e.k.Close())
		}
		errs = append(errs, e.outBuf.release(e.ctx), e.partBuf.release(e.ctx), e.stageHost.release(e.ctx), e.hidBuf.release(e.ctx),
			e.upStages[0].release(e.ctx), e.upStages[1].release(e.ctx))
		for p := range e.allocs {
			errs = append(errs, e.ctx.Free(p))
		}
		clear(e.allocs)
		if e.s != 0 {
			errs = append(errs, e.ctx.DestroyStream(e.s))
		}
		if e.side != 0 {
			errs = append(errs, e.ctx.DestroyStream(e.side), e.ctx.DestroyEvent(e.sideEv))
		}
		return errors.Join(errs...)
	})
	e.pool.Close()
	return errors.Join(err, e.ctx.Close())
}

// Info describes the loaded executor.
func (e *Executor) Info() Info { return e.info }

// Config implements engine.Runner.
func (e *Executor) Config() *model.Config { return e.cfg }

// Placements implements engine.Runner: the executor's placements, the KV
// cache's current one first.
func (e *Executor) Placements() []parallel.Placement {
	out := []parallel.Placement{e.base}
	for _, p := range e.opts.Placements {
		if p.Name != e.base.Name {
			out = append(out, p)
		}
	}
	return out
}

// KVLayout implements engine.Runner. Its DType is the dtype the model
// runs in, which the device's KV cache stores.
func (e *Executor) KVLayout() kvcache.Layout { return e.kv }

// PlanSteps implements engine.Runner.
func (e *Executor) PlanSteps() map[string]int {
	e.stepsMu.Lock()
	defer e.stepsMu.Unlock()
	return maps.Clone(e.steps)
}

// CommStats is the collective traffic of every step so far, counted as
// the CPU executor counts it (comm's ring and pairwise formulas), in bytes
// of the executor's dtype.
func (e *Executor) CommStats() comm.Stats {
	out := maps.Clone(e.replayed)
	if e.world != nil {
		for k, v := range e.world.Stats() {
			out[k] = out[k].Add(v)
		}
	}
	for k, v := range out {
		if v == (comm.Counter{}) {
			delete(out, k)
		}
	}
	return out
}

// Step implements engine.Runner: it runs b under placement p (one the
// executor holds) and returns the requested logits, float32 [NumLogits, vocab],
// valid until the next call.
func (e *Executor) Step(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]float32, error) {
	if err := e.run(ctx, b, p, false); err != nil {
		return nil, err
	}
	return e.out, nil
}

// GivesHidden implements engine.HiddenRunner: steps return hidden states
// when asked.
func (e *Executor) GivesHidden() bool { return true }

// Hidden implements engine.HiddenRunner: the final-norm hidden state of
// each logits row of the last Step whose batch set Hidden, [rows,
// hidden] in float32 (the run's dtype widened); nil otherwise. Valid
// until the next step.
func (e *Executor) Hidden() []float32 {
	if len(e.hid) == 0 {
		return nil
	}
	return e.hid
}

// StepGreedy implements engine.GreedyRunner: it runs b like Step and
// returns each logits row's argmax (the lowest id on ties), taken on the
// device, so only the token ids cross to the host. Under TP the vocabulary
// is split across ranks and the argmax is taken on the host instead.
func (e *Executor) StepGreedy(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]int, error) {
	if err := e.run(ctx, b, p, true); err != nil {
		return nil, err
	}
	return e.tokens, nil
}

// run validates b and runs it on the device thread; greedy fills e.tokens
// instead of e.out.
func (e *Executor) run(ctx context.Context, b *forward.Batch, p parallel.Placement, greedy bool) error {
	if err := e.usable(); err != nil {
		return err
	}
	dl, ok := e.layouts[p.Name]
	if !ok {
		return fmt.Errorf("cudaexec: placement %s is not held (this executor holds %v; the KV cache is under %s)", p, slices.Collect(maps.Keys(e.layouts)), e.base)
	}
	cfg := e.cfg
	if err := b.Validate(cfg.Vocab, e.opts.MaxModelLen, e.kv.BlockSize, e.kv.NumBlocks, 1); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rows := b.NumLogits()
	e.tokens = e.tokens[:0]
	if greedy && p.Plan.TP == 1 {
		e.tokens = slices.Grow(e.tokens, rows)[:rows]
	}
	argmax := greedy && p.Plan.TP == 1
	e.wantHidden, e.hid = b.Hidden && !greedy, e.hid[:0]
	if err := e.do(func() error {
		if !argmax {
			out, err := e.outBuf.get(e.ctx, rows*cfg.Vocab)
			if err != nil {
				return err
			}
			e.out = out
		}
		return e.step(dl, b, rows, argmax)
	}); err != nil {
		return fmt.Errorf("cudaexec: step under %s: %w", p, err)
	}
	if greedy && p.Plan.TP > 1 {
		for i := 0; i < rows; i++ {
			e.tokens = append(e.tokens, tensor.MaxIndex(e.out[i*cfg.Vocab:(i+1)*cfg.Vocab]))
		}
	}
	e.stepsMu.Lock()
	e.steps[p.Name]++
	e.stepsMu.Unlock()
	return nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// do runs f on the device's thread; the host tests' executor has no
// device and runs it directly.
func (e *Executor) do(f func() error) error {
	if e.ctx == nil {
		e.hostMu.Lock()
		defer e.hostMu.Unlock()
		return f()
	}
	return e.ctx.Do(f)
}

// devOps are a step's device operations besides the element-wise kernels:
// allocation, copies, GEMMs and attention, all ordered on the executor's
// stream. cudaOps runs them on the device; the package's host tests run
// them on an emulation, so the step's orchestration under every plan is
// tested without a GPU.
type devOps interface {
	alloc(bytes int64) (cuda.DevicePtr, error)
	free(p cuda.DevicePtr) error
	toDevice(dst cuda.DevicePtr, src unsafe.Pointer, bytes int64) error
	toHost(dst unsafe.Pointer, src cuda.DevicePtr, bytes int64) error
	copy(dst, src cuda.DevicePtr, bytes int64) error
	sync() error
	// The side stream carries the swaps' work beside the step's stream:
	// side returns it for kernel launches (0 on the emulation, whose
	// kernels run at once), sideToDevice, sideToHost and sideCopy queue
	// copies on it, sideMark marks the end of what is queued, and
	// sideDone reports, without waiting, whether the side stream has
	// reached the last mark.
	side() (cuda.Stream, error)
	sideToDevice(dst cuda.DevicePtr, src unsafe.Pointer, bytes int64) error
	sideToHost(dst unsafe.Pointer, src cuda.DevicePtr, bytes int64) error
	sideCopy(dst, src cuda.DevicePtr, bytes int64) error
	sideMark() error
	sideDone() (bool, error)
	// linear computes y[n, out] = x[n, in]·wᵀ for a row-major weight
	// w[out, in] in the executor's dtype, writing y in outType.
	linear(y, x, w cuda.DevicePtr, n, in, out int, outType model.DType) error
	attention(a AttnArgs) error
}

// cudaOps is devOps on the executor's device and stream.
type cudaOps struct{ e *Executor }

func (o cudaOps) alloc(bytes int64) (cuda.DevicePtr, error) { return o.e.ctx.Alloc(bytes) }
func (o cudaOps) free(p cuda.DevicePtr) error               { return o.e.ctx.Free(p) }
func (o cudaOps) sync() error                               { return o.e.ctx.SyncStream(o.e.s) }
func (o cudaOps) attention(a AttnArgs) error                { return o.e.k.Attention(o.e.s, a) }

func (o cudaOps) toDevice(dst cuda.DevicePtr, src unsafe.Pointer, bytes int64) error {
	return o.e.ctx.CopyHtoDAsync(dst, src, bytes, o.e.s)
}

func (o cudaOps) toHost(dst unsafe.Pointer, src cuda.DevicePtr, bytes int64) error {
	return o.e.ctx.CopyDtoHAsync(dst, src, bytes, o.e.s)
}

func (o cudaOps) copy(dst, src cuda.DevicePtr, bytes int64) error {
	return o.e.ctx.CopyDtoDAsync(dst, src, bytes, o.e.s)
}

// side creates the side stream and its event on first use.
func (o cudaOps) side() (cuda.Stream, error) {
	e := o.e
	if e.side != 0 {
		return e.side, nil
	}
	ev, err := e.ctx.NewEvent()
	if err != nil {
		return 0, err
	}
	s, err := e.ctx.NewStream()
	if err != nil {
		return 0, errors.Join(err, e.ctx.DestroyEvent(ev))
	}
	e.side, e.sideEv = s, ev
	return s, nil
}

func (o cudaOps) sideToDevice(dst cuda.DevicePtr, src unsafe.Pointer, bytes int64) error {
	s, err := o.side()
	if err != nil {
		return err
	}
	return o.e.ctx.CopyHtoDAsync(dst, src, bytes, s)
}

func (o cudaOps) sideToHost(dst unsafe.Pointer, src cuda.DevicePtr, bytes int64) error {
	s, err := o.side()
	if err != nil {
		return err
	}
	return o.e.ctx.CopyDtoHAsync(dst, src, bytes, s)
}

func (o cudaOps) sideCopy(dst, src cuda.DevicePtr, bytes int64) error {
	s, err := o.side()
	if err != nil {
		return err
	}
	return o.e.ctx.CopyDtoDAsync(dst, src, bytes, s)
}

func (o cudaOps) sideMark() error {
	s, err := o.side()
	if err != nil {
		return err
	}
	return o.e.ctx.RecordEvent(o.e.sideEv, s)
}

func (o cudaOps) sideDone() (bool, error) {
	if o.e.side == 0 {
		return true, nil
	}
	return o.e.ctx.EventDone(o.e.sideEv)
}

// linear is, in cuBLAS's column-major terms, yᵀ[out, n] = w·xᵀ: op(A) = Aᵀ
// with A the [in, out] column-major view of w.
func (o cudaOps) linear(y, x, w cuda.DevicePtr, n, in, out int, outType model.DType) error {
	if n == 0 {
		return nil
	}
	t := cudaType(o.e.dt)
	return o.e.blas.Gemm(true, false, out, n, in, 1, w, t, in, x, t, in, 0, y, cudaType(outType), out)
}
