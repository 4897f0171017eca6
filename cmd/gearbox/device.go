package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/gpu"
	"github.com/gearboxlm/gearbox/gpu/cudaexec"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/lora"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/tensor"
)

// deviceFlags choose where and in what precision the model runs; generate,
// serve and calibrate share them, with vLLM's names and defaults.
type deviceFlags struct {
	device  string
	dtype   string
	quant   string
	kvDType string
	memUtil float64
	eager   bool
	threads int
}

func addDeviceFlags(fs *flag.FlagSet, defaultDevice string) *deviceFlags {
	d := &deviceFlags{}
	fs.StringVar(&d.device, "device", defaultDevice, "where the model runs: auto (a CUDA GPU when one is found, else the CPU), cpu, cuda or cuda:N")
	fs.StringVar(&d.dtype, "dtype", "auto", "weights and activations: auto, bfloat16, float16 or float32 (on the GPU auto is bfloat16 for bfloat16 checkpoints, else float16; the CPU keeps the weight matrices in this dtype, auto meaning the checkpoint's, memory-mapped, and computes in float32, rounding the inputs of bfloat16 products to bfloat16 as llama.cpp does; float32 keeps them exact)")
	fs.StringVar(&d.quant, "quantization", "", "weight quantization: int8 (alias q8_0: 8-bit blocks of 32 with a scale each, quantized at load; CPU only, with --dtype auto or float32) or none")
	fs.StringVar(&d.kvDType, "kv-cache-dtype", "auto", "KV cache dtype: auto, float32, bfloat16 or float16 (auto is float32 on the CPU; bfloat16 and float16 halve the CPU cache's bytes, so a pool sized in bytes holds twice the tokens: keys and values are rounded to nearest as written, attention accumulates in float32; on the GPU the KV cache is in the --dtype the model runs in, which auto names and no other is accepted; fp8 is the simulator's, gearbox simulate and plan)")
	fs.Float64Var(&d.memUtil, "gpu-memory-utilization", 0.9, "fraction of GPU memory for weights, activations and the KV cache")
	fs.BoolVar(&d.eager, "enforce-eager", false, "GPU: run every step as plain kernel launches, without CUDA graphs")
	fs.IntVar(&d.threads, "threads", 0, "CPU threads for the kernels (default: all cores)")
	return d
}

// loadOptions are the model loading options --dtype and --quantization
// ask for: how the host holds the weight matrices (on the CPU, what the
// kernels read). It refuses int8 with a half-precision --dtype and int8 on
// a --device that names a GPU.
func (d *deviceFlags) loadOptions() (model.Options, error) {
	dt, err := model.ParseDType(d.dtype)
	if err != nil {
		return model.Options{}, err
	}
	q, err := model.ParseQuantization(d.quant)
	if err != nil {
		return model.Options{}, err
	}
	if _, err := d.kvCacheDType(); err != nil {
		return model.Options{}, err
	}
	o := model.Options{DType: dt, Quantization: q}
	if q == model.Int8 {
		if dt == model.BFloat16 || dt == model.Float16 {
			return o, fmt.Errorf("--quantization %s with --dtype %s: int8 matrices multiply float32 activations on the CPU and every other tensor stays float32; use --dtype auto or float32", d.quant, dt)
		}
		if want, err := ParseDevice(d.device); err == nil && want.Kind == CUDA {
			return o, fmt.Errorf("--quantization %s runs on the CPU only; use --device cpu, or no --quantization on the GPU", d.quant)
		}
	}
	return o, o.Check()
}

// loadModel loads dir (the built-in model when dir is empty) as --dtype
// and --quantization ask, conversions and quantization split over
// --threads; progress, if not nil, draws a progress bar for a directory.
func (d *deviceFlags) loadModel(dir string, progress io.Writer) (*model.Model, error) {
	opts, err := d.loadOptions()
	if err != nil {
		return nil, err
	}
	pool := tensor.NewPool(d.threads)
	defer pool.Close()
	opts.Pool = pool
	if progress != nil && dir != "" {
		return loadModelWithProgress(dir, progress, opts)
	}
	return loadModel(dir, opts)
}

// kvCacheDType reads --kv-cache-dtype: auto (model.DTypeAuto), or
// float32, bfloat16 or float16 in any spelling the simulator's
// --kv-cache-dtype accepts (sim.ParseDType: bf16, fp16, half, fp32, …).
// fp8, which the simulator models on GPUs, is refused: neither executor
// stores it.
func (d *deviceFlags) kvCacheDType() (model.DType, error) {
	s := strings.ToLower(strings.TrimSpace(d.kvDType))
	if s == "" || s == "auto" {
		return model.DTypeAuto, nil
	}
	k, err := sim.ParseDType(s)
	if err != nil {
		return 0, fmt.Errorf("--kv-cache-dtype %q: want auto, float32, bfloat16 or float16", d.kvDType)
	}
	switch k {
	case sim.BF16:
		return model.BFloat16, nil
	case sim.FP16:
		return model.Float16, nil
	case sim.FP32:
		return model.Float32, nil
	}
	return 0, fmt.Errorf("--kv-cache-dtype %s: the CPU stores its KV cache in float32, bfloat16 or float16 and the GPU in its --dtype, neither in fp8 (gearbox simulate and plan model fp8 KV caches on GPUs)", d.kvDType)
}

// cpuKVBudget is the most bytes of keys and values the CPU's default KV
// pool takes (unless one full context needs more).
const cpuKVBudget = 4 << 30

// cpuKVBlocks is the CPU's default KV pool in blocks per replica: maxSeqs
// full contexts of maxModelLen tokens, at most cpuKVBudget bytes of the
// whole model's keys and values in dtype kv — a BF16 or F16 cache holds
// twice float32's tokens in the budget — and at least one full context.
func cpuKVBlocks(cfg *model.Config, kv tensor.DType, blockSize, maxModelLen, maxSeqs int) int {
	perBlock := kvBlockBytes(cfg, kv, blockSize)
	perSeq := int64((maxModelLen + blockSize - 1) / blockSize)
	return int(max(perSeq, min(int64(max(maxSeqs, 1))*perSeq, cpuKVBudget/perBlock)))
}

// kvBlockBytes is one block of the whole model's keys and values in kv.
func kvBlockBytes(cfg *model.Config, kv tensor.DType, blockSize int) int64 {
	return kvcache.Layout{Layers: cfg.Layers, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim, BlockSize: blockSize, DType: kv}.TokenBytes() * int64(blockSize)
}

// hostBlocks is the host KV store (seesaw) of bytes per replica in blocks
// of the whole model's keys and values in kv: at least one; 0 for none.
func hostBlocks(cfg *model.Config, kv tensor.DType, blockSize int, bytes int64) int {
	if bytes <= 0 {
		return 0
	}
	return int(max(1, bytes/kvBlockBytes(cfg, kv, blockSize)))
}

// runnerSpec is what a command asks of the executor, whichever device runs
// it.
type runnerSpec struct {
	placements  []parallel.Placement // the policy's, the first the one the KV starts under
	hostKVBytes int64                // host KV store per replica, in bytes (seesaw); 0 for none
	blockSize   int
	numBlocks   int // 0: the device's default
	maxTokens   int // largest step in tokens
	maxSeqs     int // most sequences at once
	maxModelLen int
	sidpSlots   int             // WaS slots per rank under a pooled (sidp) placement; 0: dp−1
	csps        *policy.CSPS    // --policy csps: the CPU's sequence-sharded executor
	lora        bool            // --enable-lora: the CPU executor, which runs adapters
	adapters    []*lora.Adapter // --lora-modules, installed as ids 1, 2, …
	// world makes the CPU ranks' World (--transport mpi); nil: in-process
	world func(ranks int) (*comm.World, error)
}

// built is an executor ready for an engine, with what to log about it and
// how to release it.
type built struct {
	runner engine.Runner
	device string // one line for the start-up log
	close  func()
	draft  *built // the draft model's, for speculative decoding; nil for none
}

// with gives b the draft model's runner d (nil for none): closing b
// closes both.
func (b *built) with(d *built) *built {
	if d == nil {
		return b
	}
	c := *b
	c.draft = d
	c.close = func() { b.close(); d.close() }
	return &c
}

// draftRunner is the draft model's runner, or nil.
func (b *built) draftRunner() engine.Runner {
	if b.draft == nil {
		return nil
	}
	return b.draft.runner
}

// closeIfAny closes b unless it is nil.
func (b *built) closeIfAny() {
	if b != nil {
		b.close()
	}
}

// newRunner resolves --device and builds the executor there. On the CPU the
// KV cache is in --kv-cache-dtype (float32 for auto) and the default KV
// pool holds maxSeqs full contexts, at most 4 GiB in that dtype
// (cpuKVBlocks); on a GPU it is sized from --gpu-memory-utilization.
func (d *deviceFlags) newRunner(m *model.Model, spec runnerSpec, logger *slog.Logger) (*built, error) {
	dt, err := model.ParseDType(d.dtype)
	if err != nil {
		return nil, err
	}
	kvd, err := d.kvCacheDType()
	if err != nil {
		return nil, err
	}
	want, err := ParseDevice(d.device)
	if err != nil {
		return nil, err
	}
	choice, err := Resolve(want, gpu.NewSystemProber())
	if err != nil {
		return nil, err
	}
	cfg := m.Config
	if spec.maxModelLen == 0 {
		spec.maxModelLen = cfg.MaxPositions
	}
	// What only the CPU executor runs: refused on a GPU named, the CPU
	// chosen (and said why) under auto.
	for _, cpuOnly := range []struct {
		asked     bool
		what, gpu string
	}{
		{spec.csps != nil, "--policy csps runs", "no sequence-sharded KV layout"},
		{spec.lora, "LoRA adapters run", "no LoRA kernels"},
	} {
		if !cpuOnly.asked || choice.Device.Kind != CUDA {
			continue
		}
		if want.Kind != Auto {
			return nil, fmt.Errorf("%s on the CPU executor only; the GPU backend has %s: use --device cpu", cpuOnly.what, cpuOnly.gpu)
		}
		choice = Choice{Device: Device{Kind: CPU}, Reason: "auto: using cpu: " + cpuOnly.what + " on the CPU executor only"}
	}
	if choice.Device.Kind == CUDA {
		b, err := d.newCUDARunner(m, dt, kvd, choice, spec, logger)
		if err == nil || want.Kind != Auto || !errors.Is(err, gpu.ErrNotFound) {
			return b, err
		}
		// auto with a driver but without the toolkit's libraries (a
		// driver-only host): serve on the CPU rather than not at all.
		logger.Warn("auto: the CUDA driver loads but a CUDA library is missing; using the cpu", "err", err)
		choice = Choice{Device: Device{Kind: CPU}, Reason: "auto: using cpu: " + err.Error()}
	}

	kv := kvd.Tensor()
	blocks := spec.numBlocks
	if blocks == 0 {
		blocks = cpuKVBlocks(cfg, kv, spec.blockSize, spec.maxModelLen, spec.maxSeqs)
	}
	host := hostBlocks(cfg, kv, spec.blockSize, spec.hostKVBytes)
	pool := tensor.NewPool(d.threads)
	if spec.csps != nil {
		x, err := newCSPSRunner(m, spec.csps, kv, spec.blockSize, blocks, pool)
		if err != nil {
			pool.Close()
			return nil, err
		}
		line := fmt.Sprintf("%s: %d threads, csps over %d ranks (SPT ≤ %d tokens), %s, over all ranks: %s", choice.Reason, pool.Threads(), x.Ranks(), x.SPTMax(),
			weightsLine(m.Weights), kvLine(x.KVLayout(), cfg))
		return &built{runner: x, device: line, close: func() { pool.Close(); _ = m.Close() }}, nil
	}
	x, err := cpuexec.NewExecutor(cfg, m.Weights, cpuexec.Options{Placements: spec.placements, HostBlocks: host, WeightsFromHost: host > 0,
		BlockSize: spec.blockSize, NumBlocks: blocks, KVDType: kv, Pool: pool, SiDPSlots: spec.sidpSlots, World: spec.world, Adapters: spec.adapters})
	if err != nil {
		pool.Close()
		return nil, err
	}
	line := fmt.Sprintf("%s: %d threads, %s, %s", choice.Reason, pool.Threads(), weightsLine(m.Weights), kvLine(x.KVLayout(), cfg))
	return &built{runner: x, device: line, close: func() { pool.Close(); _ = m.Close() }}, nil
}

// weightsLine describes how the CPU holds the weights: the matrices'
// format, whether they are the checkpoint's bytes in place (its
// memory-mapped files, for a directory), the bytes, and the activations
// (float32, rounded to bfloat16 where they meet BF16 matrices).
func weightsLine(w *model.Weights) string {
	d, ok := w.MatrixDType()
	format := d.String()
	if !ok {
		format = "mixed-format"
	}
	place := ""
	if w.Views() {
		place = " in place in the checkpoint"
	}
	acts := "float32 activations"
	if d == tensor.BF16 || !ok {
		acts += " (rounded to bfloat16 as inputs of bf16 products)"
	}
	return fmt.Sprintf("%s weights%s (%s), %s", format, place, humanBytes(w.Bytes()), acts)
}

// kvLine describes the CPU's KV pool: its dtype, bytes per token of the
// whole model, and blocks, tokens and bytes per replica.
func kvLine(kv kvcache.Layout, cfg *model.Config) string {
	whole := kvBlockBytes(cfg, kv.DType, kv.BlockSize)
	return fmt.Sprintf("%s KV cache (%d bytes per token): %d blocks, %d tokens, %s", kvDTypeName(kv.DType), whole/int64(kv.BlockSize),
		kv.NumBlocks, kv.NumBlocks*kv.BlockSize, humanBytes(whole*int64(kv.NumBlocks)))
}

// kvDTypeName is the --kv-cache-dtype spelling of a CPU KV cache's dtype.
func kvDTypeName(d tensor.DType) string {
	switch d {
	case tensor.BF16:
		return "bfloat16"
	case tensor.F16:
		return "float16"
	}
	return "float32"
}

// kernelCache is the on-disk cache of compiled GPU kernels.
func kernelCache() (*gpu.KernelCache, error) {
	dir, err := gpu.DefaultKernelCacheDir(os.Getenv)
	if err != nil {
		return nil, err
	}
	return &gpu.KernelCache{Dir: dir}, nil
}

// commStats is the executor's collective traffic.
func (b *built) commStats() comm.Stats {
	if x, ok := b.runner.(interface{ CommStats() comm.Stats }); ok {
		return x.CommStats()
	}
	return comm.Stats{}
}

// newCUDARunner builds the CUDA executor on the chosen device and captures
// its CUDA graphs, as vLLM does at start-up. The CUDA executor keeps the
// KV cache in the dtype the model runs in: a --kv-cache-dtype (kv) other
// than auto must name that one.
func (d *deviceFlags) newCUDARunner(m *model.Model, dt, kv model.DType, choice Choice, spec runnerSpec, logger *slog.Logger) (*built, error) {
	if run := m.Config.ResolveDType(dt); kv != model.DTypeAuto && kv != run {
		return nil, fmt.Errorf("--kv-cache-dtype %s on the GPU: the CUDA executor keeps the KV cache in the dtype the model runs in, %s here; use --kv-cache-dtype auto, or --dtype %s", kv, run, kv)
	}
	for _, p := range spec.placements {
		if p.FFN.Pooled() {
			return nil, fmt.Errorf("placement %s: the CUDA executor does not run SiDP's pooled MLP weights (--policy sidp); use --device cpu", p)
		}
	}
	cache, err := kernelCache()
	if err != nil {
		logger.Warn("kernel cache disabled", "err", err)
	}
	x, err := cudaexec.New(m.Config, m.Weights, cudaexec.Options{
		Device: choice.Device.Index, DType: dt, Placements: spec.placements, BlockSize: spec.blockSize, NumBlocks: spec.numBlocks,
		MemoryUtilization: d.memUtil, MaxNumTokens: spec.maxTokens, MaxNumSeqs: spec.maxSeqs,
		MaxModelLen: spec.maxModelLen, EnforceEager: d.eager, KernelCache: cache, Logger: logger,
		HostBlocks: hostBlocks(m.Config, m.Config.ResolveDType(dt).Tensor(), spec.blockSize, spec.hostKVBytes),
	})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := x.CaptureGraphs(); err != nil {
		return nil, errors.Join(err, x.Close())
	}
	info := x.Info()
	if len(info.Buckets) > 0 {
		logger.Info("captured CUDA graphs", "buckets", len(info.Buckets), "seconds", time.Since(start).Seconds())
	}
	line := fmt.Sprintf("%s: %s, %s, %.2f GiB weights, KV cache %d tokens", choice.Reason, info.Device, info.DType,
		float64(info.WeightBytes)/(1<<30), info.KVTokens)
	if n := x.HostBlocks(); n > 0 {
		line += fmt.Sprintf(", host KV store %d tokens", n*spec.blockSize)
	}
	return &built{runner: x, device: line, close: func() { _ = x.Close(); _ = m.Close() }}, nil
}
