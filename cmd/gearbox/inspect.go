package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"sort"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/gpu/cudaexec"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/model/safetensors"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/tensor"
)

// inspectResult is what inspect reports.
type inspectResult struct {
	Model             string           `json:"model"`
	Architecture      string           `json:"architecture"`
	ModelType         string           `json:"model_type"`
	Layers            int              `json:"num_hidden_layers"`
	Hidden            int              `json:"hidden_size"`
	Intermediate      int              `json:"intermediate_size"`
	Heads             int              `json:"num_attention_heads"`
	KVHeads           int              `json:"num_key_value_heads"`
	HeadDim           int              `json:"head_dim"`
	Vocab             int              `json:"vocab_size"`
	Context           int              `json:"max_position_embeddings"`
	Tied              bool             `json:"tie_word_embeddings"`
	Parameters        int64            `json:"parameters"`
	BytesPerDtype     map[string]int64 `json:"bytes_per_dtype"`
	KVBytesPerTokenF  int              `json:"kv_bytes_per_token_fp32"`
	KVBytesPerTokenBF int              `json:"kv_bytes_per_token_bf16"`
	CPUKV             cpuKV            `json:"cpu_kv_cache"`          // the CPU's KV cache under --kv-cache-dtype
	WeightFormat      string           `json:"weight_format"`         // the CPU's matrix format under --dtype/--quantization
	WeightInPlace     bool             `json:"weights_in_place"`      // the matrices are the checkpoint's bytes (memory-mapped for a directory)
	ResidentBytes     int64            `json:"resident_weight_bytes"` // the whole model as the CPU holds it
	Plan              string           `json:"plan"`
	Policy            string           `json:"policy"`
	Ranks             []rankBytes      `json:"ranks"`
	GPU               *gpuInfo         `json:"gpu,omitempty"`
}

// cpuKV is the CPU's KV cache under --kv-cache-dtype: its dtype, the
// whole model's bytes per token, and the default pool serve would
// allocate (cpuKVBlocks) for --max-num-seqs contexts of --max-model-len
// tokens in blocks of --block-size.
type cpuKV struct {
	DType         string `json:"dtype"`
	BytesPerToken int64  `json:"bytes_per_token"`
	Blocks        int    `json:"blocks"`
	Tokens        int    `json:"tokens"`
	Bytes         int64  `json:"bytes"`
}

// gpuInfo is what the CUDA executor holds once loaded (inspect --device cuda).
type gpuInfo struct {
	Device       string `json:"device"`
	DType        string `json:"dtype"`
	TotalMemory  int64  `json:"total_memory_bytes"`
	WeightBytes  int64  `json:"weight_bytes"`
	KVBytes      int64  `json:"kv_cache_bytes"`
	KVBlocks     int    `json:"kv_blocks"`
	KVTokens     int    `json:"kv_tokens"`
	GraphBuckets []int  `json:"graph_buckets"`
}

// rankBytes is one rank's memory under the plan: fp32 weight bytes, the
// weights as the CPU holds them under --dtype and --quantization, and the
// KV bytes per token in the CPU's --kv-cache-dtype.
type rankBytes struct {
	Rank             int            `json:"rank"`
	Coord            parallel.Coord `json:"coord"`
	HeadChunk        int            `json:"head_chunk"`
	WeightBytes      int64          `json:"weight_bytes"`
	ResidentBytes    int64          `json:"resident_weight_bytes"`        // the rank's shard in the CPU's format (row splits view the host copy)
	ShiftWeightBytes int64          `json:"shift_weight_bytes,omitempty"` // the policy's other placements' shards (Shift's separate model)
	KVBytesPerToken  int64          `json:"kv_bytes_per_token"`
	SiDP             *sidpBytes     `json:"sidp,omitempty"` // --policy sidp: the pooled MLP's memory beside plain DP
}

// sidpBytes is one rank's memory under SiDP beside plain DP at the same
// plan (parallel.SiDPMemory, fp32 bytes), and the KV tokens each leaves
// in the same budget: plain DP's weights plus the default KV pool.
type sidpBytes struct {
	DPWeightBytes int64 `json:"dp_weight_bytes"`
	WeightBytes   int64 `json:"weight_bytes"`
	SlotBytes     int64 `json:"slot_bytes"`
	Slots         int   `json:"slots"`
	GainBytes     int64 `json:"gain_bytes"` // (1−1/N)·F/TP − C_slots when N divides the layers
	DPKVTokens    int64 `json:"dp_kv_tokens"`
	KVTokens      int64 `json:"kv_tokens"`
}

func runInspect(_ context.Context, args []string, stdout, stderr io.Writer) error {
	flags := newFlagSet("inspect", "inspect [--model DIR] [--plan PLAN [--policy shift]] [--dtype D] [--quantization int8] [--kv-cache-dtype D] [--device cuda] [--output text|json]", stderr)
	modelDir := flags.String("model", "", "Hugging Face model directory (default: the built-in stories260K model)")
	output := flags.String("output", "text", "output format: text or json")
	par := addParallelFlags(flags)
	dev := addDeviceFlags(flags, "cpu")
	maxLen := flags.Int("max-model-len", 0, "context length the KV pool is sized for (default: the model's)")
	blockSize := flags.Int("block-size", 16, "KV cache block size in tokens")
	maxSeqs := flags.Int("max-num-seqs", 256, "requests running at once: the CPU's default KV pool holds that many full contexts (at most 4 GiB); with --device cuda it sets the CUDA graph buckets")
	if err := flags.Parse(args); err != nil {
		return err
	}
	var (
		cfg  *model.Config
		set  *safetensors.Set
		name string
		err  error
	)
	if *modelDir == "" {
		name = builtin.Name
		cfg, set, err = openBuiltin()
	} else {
		name = *modelDir
		if cfg, err = model.LoadConfig(*modelDir); err == nil {
			set, err = safetensors.OpenDir(*modelDir)
		}
	}
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	defer set.Close()
	res := inspectResult{
		Model: name, Architecture: cfg.Architecture, ModelType: cfg.ModelType, Layers: cfg.Layers,
		Hidden: cfg.Hidden, Intermediate: cfg.Intermediate, Heads: cfg.Heads, KVHeads: cfg.KVHeads,
		HeadDim: cfg.HeadDim, Vocab: cfg.Vocab, Context: cfg.MaxPositions, Tied: cfg.TieWordEmbeddings,
		BytesPerDtype: map[string]int64{}, KVBytesPerTokenF: cfg.KVBytesPerToken(4), KVBytesPerTokenBF: cfg.KVBytesPerToken(2),
	}
	for _, n := range set.Names() {
		t, _ := set.Tensor(n)
		res.Parameters += int64(t.NumElements())
		res.BytesPerDtype[string(t.DType)] += int64(len(t.Bytes()))
	}
	plan, pol, err := par.resolve(cfg)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	// The weights as the CPU would hold them: views of the mapped files
	// under auto, converted or quantized copies otherwise.
	opts, err := dev.loadOptions()
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	pool := tensor.NewPool(dev.threads)
	defer pool.Close()
	opts.Pool = pool
	w, err := model.LoadWeights(cfg, set, opts)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	res.WeightFormat, res.WeightInPlace, res.ResidentBytes = "mixed", w.Views(), w.Bytes()
	if d, ok := w.MatrixDType(); ok {
		res.WeightFormat = d.String()
	}
	res.Plan, res.Policy = plan.String(), pol.String()
	kvd, err := dev.kvCacheDType()
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	kv := kvd.Tensor()
	ctxLen := cfg.MaxPositions
	if *maxLen > 0 {
		ctxLen = *maxLen
	}
	if *blockSize <= 0 {
		return fmt.Errorf("inspect: --block-size must be positive, got %d", *blockSize)
	}
	blocks := cpuKVBlocks(cfg, kv, *blockSize, ctxLen, *maxSeqs)
	res.CPUKV = cpuKV{DType: kvDTypeName(kv), BytesPerToken: kvBlockBytes(cfg, kv, 1), Blocks: blocks, Tokens: blocks * *blockSize,
		Bytes: kvBlockBytes(cfg, kv, *blockSize) * int64(blocks)}
	elem := int64(kvcache.Layout{DType: kv}.ElemBytes())
	base := parallel.Standard(plan)
	sidp, pooled := pol.(*policy.SiDP)
	switch c := cspsPolicy(pol); {
	case pooled:
		base = sidp.WaS
	case c != nil:
		// csps: every rank holds the full weights and every KV head of
		// the tokens it holds, as a data-parallel replica does.
		base = parallel.Standard(parallel.Plan{DP: c.Ranks, PP: 1, SP: 1, TP: 1})
	}
	for r := range base.Coords {
		rb := rankBytes{Rank: r, Coord: base.Coords[r], HeadChunk: base.Chunk(r),
			WeightBytes: 4 * base.WeightElems(cfg, r), ResidentBytes: parallel.NewShard(nil, cfg, w, base, r).Bytes(),
			KVBytesPerToken: elem * base.KVElemsPerToken(cfg, r)}
		if pooled {
			slots := par.sidpSlotsFor(pol)
			if slots == 0 {
				slots = cpuexec.DefaultSlots(plan.DP)
			}
			m := base.SiDPMemory(cfg, r, slots, 4)
			tokens := int64(res.CPUKV.Tokens)
			rb.SiDP = &sidpBytes{DPWeightBytes: m.DPWeights, WeightBytes: m.Weights, SlotBytes: m.Slots, Slots: slots, GainBytes: m.Gain,
				DPKVTokens: tokens, KVTokens: tokens + m.Gain/rb.KVBytesPerToken}
		}
		for _, o := range pol.Placements()[1:] {
			rb.ShiftWeightBytes += 4 * o.WeightElems(cfg, r)
		}
		res.Ranks = append(res.Ranks, rb)
	}
	if dev.device != "cpu" {
		if res.GPU, err = inspectGPU(*modelDir, dev, runnerSpec{blockSize: *blockSize, maxSeqs: *maxSeqs, maxTokens: 8192, maxModelLen: *maxLen}); err != nil {
			return fmt.Errorf("inspect: %w", err)
		}
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "model          %s\narchitecture   %s (%s)\n", res.Model, res.Architecture, res.ModelType)
	fmt.Fprintf(stdout, "layers         %d\nhidden         %d\nintermediate   %d\n", res.Layers, res.Hidden, res.Intermediate)
	fmt.Fprintf(stdout, "heads          %d query, %d KV (head_dim %d)\nvocab          %d\ncontext        %d\ntied head      %v\n",
		res.Heads, res.KVHeads, res.HeadDim, res.Vocab, res.Context, res.Tied)
	fmt.Fprintf(stdout, "parameters     %d (%s)\n", res.Parameters, humanCount(res.Parameters))
	dtypes := make([]string, 0, len(res.BytesPerDtype))
	for d := range res.BytesPerDtype {
		dtypes = append(dtypes, d)
	}
	sort.Strings(dtypes)
	for _, d := range dtypes {
		fmt.Fprintf(stdout, "bytes %-8s %d (%s)\n", d, res.BytesPerDtype[d], humanBytes(res.BytesPerDtype[d]))
	}
	fmt.Fprintf(stdout, "KV per token   %d bytes fp32, %d bytes bf16\n", res.KVBytesPerTokenF, res.KVBytesPerTokenBF)
	k := res.CPUKV
	fmt.Fprintf(stdout, "CPU KV cache   %s, %d bytes per token; default pool %d blocks, %d tokens, %s (--max-num-seqs %d, %d-token contexts, at most %s)\n",
		k.DType, k.BytesPerToken, k.Blocks, k.Tokens, humanBytes(k.Bytes), *maxSeqs, ctxLen, humanBytes(cpuKVBudget))
	place := ""
	if res.WeightInPlace {
		place = ", in place in the checkpoint"
	}
	fmt.Fprintf(stdout, "CPU weights    %d (%s) resident, %s matrices%s\n", res.ResidentBytes, humanBytes(res.ResidentBytes), res.WeightFormat, place)
	fmt.Fprintf(stdout, "\nplan %s, policy %s (fp32 bytes per rank; resident: the CPU's %s shard; KV per token in %s)\n", res.Plan, res.Policy, res.WeightFormat, k.DType)
	fmt.Fprintf(stdout, "%-5s %-20s %-6s %-14s %-14s %-20s %s\n", "rank", "dp,pp,sp,tp", "chunk", "weights", "resident", "shift weights", "KV per token")
	for _, rb := range res.Ranks {
		extra := "-"
		if rb.ShiftWeightBytes > 0 {
			extra = fmt.Sprintf("%s (+%.1f%%)", humanBytes(rb.ShiftWeightBytes), 100*float64(rb.ShiftWeightBytes)/float64(rb.WeightBytes))
		}
		c := rb.Coord
		fmt.Fprintf(stdout, "%-5d %-20s %-6d %-14s %-14s %-20s %d B\n", rb.Rank, fmt.Sprintf("%d,%d,%d,%d", c.DP, c.PP, c.SP, c.TP),
			rb.HeadChunk, humanBytes(rb.WeightBytes), humanBytes(rb.ResidentBytes), extra, rb.KVBytesPerToken)
	}
	for _, rb := range res.Ranks {
		if m := rb.SiDP; m != nil {
			if rb.Rank == 0 {
				fmt.Fprintf(stdout, "\nsidp: each layer's MLP on replica l mod %d; %d WaS slots per rank; KV tokens in plain DP's budget (its weights + the default pool)\n", plan.DP, m.Slots)
				fmt.Fprintf(stdout, "%-5s %-14s %-14s %-14s %-14s %-14s %s\n", "rank", "plain DP", "sidp weights", "slots", "gain", "KV plain DP", "KV sidp")
			}
			fmt.Fprintf(stdout, "%-5d %-14d %-14d %-14d %-14d %-14d %d (%.2fx)\n", rb.Rank, m.DPWeightBytes, m.WeightBytes, m.SlotBytes, m.GainBytes,
				m.DPKVTokens, m.KVTokens, float64(m.KVTokens)/float64(max(m.DPKVTokens, 1)))
		}
	}
	if g := res.GPU; g != nil {
		fmt.Fprintf(stdout, "\ndevice         %s\ndtype          %s\nmemory         %s\n", g.Device, g.DType, humanBytes(g.TotalMemory))
		fmt.Fprintf(stdout, "weights        %s\nKV cache       %s: %d blocks, %d tokens\ngraph buckets  %v\n",
			humanBytes(g.WeightBytes), humanBytes(g.KVBytes), g.KVBlocks, g.KVTokens, g.GraphBuckets)
	}
	return nil
}

// inspectGPU loads the model on the device --device names and reports what
// the executor holds there.
func inspectGPU(dir string, dev *deviceFlags, spec runnerSpec) (*gpuInfo, error) {
	m, err := dev.loadModel(dir, nil)
	if err != nil {
		return nil, err
	}
	spec.placements = []parallel.Placement{parallel.Standard(parallel.Single)}
	run, err := dev.newRunner(m, spec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	defer run.close()
	x, ok := run.runner.(*cudaexec.Executor)
	if !ok {
		return nil, fmt.Errorf("--device %s: no GPU in use (%s)", dev.device, run.device)
	}
	info := x.Info()
	return &gpuInfo{
		Device: info.Device, DType: info.DType.String(), TotalMemory: info.TotalMemory, WeightBytes: info.WeightBytes,
		KVBytes: info.KVBytes, KVBlocks: info.KVBlocks, KVTokens: info.KVTokens, GraphBuckets: info.Buckets,
	}, nil
}

func openBuiltin() (*model.Config, *safetensors.Set, error) {
	fsys := builtin.FS()
	data, err := fs.ReadFile(fsys, "config.json")
	if err != nil {
		return nil, nil, err
	}
	cfg, err := model.ParseConfig(data)
	if err != nil {
		return nil, nil, err
	}
	blob, err := fs.ReadFile(fsys, "model.safetensors")
	if err != nil {
		return nil, nil, err
	}
	f, err := safetensors.Parse(builtin.Name+"/model.safetensors", blob)
	if err != nil {
		return nil, nil, err
	}
	set, err := safetensors.NewSet(f)
	return cfg, set, err
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
