package sim

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// GPU is one accelerator type: datasheet numbers and how close kernels get
// to them. Bandwidths are bytes per second in one direction, FLOPS are
// dense (datasheets quote the 2:4-sparse figure, twice these, with an
// asterisk). Memory is the datasheet capacity in GiB, which is what the
// driver reports within 1% (81,559 MiB on an H100 SXM 80GB).
type GPU struct {
	Name         string
	MemoryBytes  int64
	HBMBytesPerS float64 // device memory bandwidth (HBM or GDDR)
	BF16FLOPS    float64 // dense BF16/FP16 tensor-core peak; FP32 activations run on TF32 at half this
	FP8FLOPS     float64 // dense FP8 tensor-core peak; 0 when the GPU has no FP8 tensor cores
	// FP32FLOPS is the CUDA cores' FP32 peak (an FMA is two). A GEMM of a
	// few rows (a decode GEMV) runs on them rather than in tensor-core
	// tiles, so no GEMM computes slower than this (CostModel.gemm); 0 when
	// the datasheet gives none.
	FP32FLOPS       float64
	NVLinkBytesPerS float64 // per GPU, one direction (half the datasheet's bidirectional figure); 0 when none
	PCIe            string  // host link, e.g. "Gen5 x16"
	PCIeBytesPerS   float64 // one direction (half the datasheet's bidirectional figure)
	L2Bytes         float64 // on-chip L2 cache
	Eff             Efficiency
	// WeightGEMM is the GEMM rate by weight dtype where it was measured
	// per weight format: a calibrated CPU, whose kernels differ by format
	// (bfloat16 pairs, half-precision widened to float32). A GEMM whose
	// weights have an entry runs at Eff.Matmul times its curve instead of
	// the tensor peak's; nil for catalog GPUs.
	WeightGEMM map[DType]GEMMCurve
	Sources    []string

	names   []string // accepted spellings in node names, lower case
	devices []string // the names CUDA gives this part (cuDeviceGetName, nvidia-smi)
}

// Efficiency is how close one GPU type gets to its datasheet, fitted once
// per type and used by every experiment (no per-experiment factors).
type Efficiency struct {
	// Matmul is the asymptotic fraction of the dense tensor peak a large
	// GEMM reaches; a GEMM of shape (m, n, k) reaches
	// Matmul·s(m)·s(n)·s(k) with s(x) = x/(x+GEMMHalf).
	Matmul float64
	// GEMMHalf is the size (elements) at which one GEMM dimension alone
	// halves the compute efficiency: tile and wave quantization.
	GEMMHalf float64
	// Memory is the fraction of datasheet bandwidth a streaming kernel
	// reaches on operands much larger than L2.
	Memory float64
	// Attention is FlashAttention's fraction of the dense 16-bit peak.
	Attention float64
	// AttentionDecode is the same fraction for decode attention (one
	// query per sequence, its keys streamed from memory) where it was
	// measured apart from prefill (a calibrated CPU); 0 means Attention.
	AttentionDecode float64
	// KernelLatency is the floor of one kernel in a captured CUDA graph
	// (launch gap and ramp), seconds.
	KernelLatency float64
	// LaunchLatency is the host's time to launch one kernel on its own,
	// for the steps an engine runs without a CUDA graph (Gearbox's GPU
	// executor graphs decode-only steps; prefill and mixed steps launch
	// each kernel), seconds. Launches are asynchronous: such a step takes
	// at least its kernel count times this, and more only where the
	// device is slower. 0: no bound (an engine that graphs every step, as
	// vLLM's piecewise graphs do, or the CPU).
	LaunchLatency float64
	// StepOverhead is the serving engine's host time per step that is not
	// hidden behind the GPU, seconds.
	StepOverhead float64
	// LogitsBytesPerS is the rate at which the engine brings a step's
	// float32 logits (rows × vocabulary slice) to the host to sample them,
	// bytes per second, where it was measured (a calibrated GPU running
	// Gearbox's CUDA executor); 0 means the logits stay where they are
	// computed: vLLM samples on the GPU, the CPU engine computes them in
	// host memory.
	LogitsBytesPerS float64
}

// Global constants of the cost model. Each is the same for every
// experiment; the GPU-specific ones live in the catalog below.
const (
	// GEMMHalfSize is Efficiency.GEMMHalf for every catalog GPU. With 64,
	// the H100 curve through GPU.md's measured 808 TFLOP/s at 8192³
	// predicts 798 TFLOP/s at the best shape of the ml-engineering MAMF
	// table (6144×17920×2816, measured 792.1), and the A100 SXM and PCIe
	// MAMF rows (measured at very different shapes) give the same
	// asymptote within 1% (0.897 and 0.891).
	GEMMHalfSize = 64

	// MemoryEfficiency is Efficiency.Memory for every catalog GPU: GPU.md's
	// grid-stride copy on the project's H100 moved 2,835 GB/s of the
	// 3,350 GB/s datasheet bandwidth (0.846). No other GPU was measured.
	MemoryEfficiency = 2835.0 / 3350.0

	// AttentionEfficiency is Efficiency.Attention for every catalog GPU:
	// FlashAttention-2 reaches 50–73% of the A100's peak in the forward
	// pass (Dao 2023, abstract) and FlashAttention-3 up to 75% of the
	// H100's BF16 peak (Shah et al. 2024, abstract), less with a causal
	// mask and at a few thousand tokens; 0.6 is the low end both share.
	AttentionEfficiency = 0.6

	// KernelLatency is Efficiency.KernelLatency for every catalog GPU. GPU.md's
	// CUDA-graph decode of a Llama-3.2-1B shape took 2.85 ms against a
	// 0.87 ms bandwidth floor and an 8B shape 9.67 ms against 5.67 ms:
	// 124 µs and 125 µs per layer beyond streaming the weights, for the
	// about 40 kernels of a transformers eager Llama layer (two RMSNorms of
	// six ops, rotary embedding of q and k, four projections, SDPA, the
	// cache update, the SwiGLU ops, two residual adds): 3.1 µs a kernel.
	KernelLatency = 3.1e-6

	// VLLMStepOverhead is Efficiency.StepOverhead for catalog GPUs: the host
	// time per step of vLLM v0.9 (V1 engine, multiprocess TP workers) that
	// does not overlap the GPU. It is the one constant fitted to a paper
	// number: the Shift Parallelism paper's single-request TPOT of
	// Llama-3.3-70B FP8 at TP=8 on 8×H200 (9.34 ms, §4.3.1) minus this
	// model's GPU time for that step (7.64 ms; TestPaperTPOT prints it).
	// Qwen3-32B's 8.68 ms is then a prediction. The paper's §4.4 names
	// vLLM's overhead as a large share of the step time of smaller models.
	VLLMStepOverhead = 1.7e-3

	// FlashQueryTile is FlashAttention's query block: a prefill chunk of n
	// tokens reads its keys and values once per ceil(n/128) query blocks
	// (block M = 128 in FlashAttention-2 and -3 for head_dim 128).
	FlashQueryTile = 128

	// LinkEfficiency is the fraction of the one-way link bandwidth a
	// large-message ring collective reaches: nccl-tests bus bandwidth on
	// 8-GPU NVSwitch systems is about 230 of 300 GB/s (A100) and 360 of
	// 450 GB/s (H100).
	LinkEfficiency = 0.8

	// NVLinkHopLatency is the latency of one algorithm step over NVLink,
	// seconds: vLLM's custom all-reduce of 4 KB on H100 took 8.8, 8.5 and
	// 9.3 µs at TP 2, 4, 8 without CUDA graphs (sgl-project/sglang#2904),
	// which a kernel latency plus 2(P−1) steps of 0.5 µs reproduces at TP=8.
	NVLinkHopLatency = 0.5e-6

	// PCIeHopLatency is the latency of one algorithm step over PCIe:
	// nccl-tests all_reduce of 8 bytes on 8 PCIe RTX 4090s took 42 µs
	// (NVIDIA/nccl#1530): (42 − 5 launch) µs over the ring's 14 steps.
	PCIeHopLatency = 2.6e-6

	// PCIeGen4x8BytesPerS is the one-way bandwidth of a PCIe 4.0 x8 link,
	// the host link of each GPU in AWS's g5.48xlarge (8×A10G) and
	// g6.48xlarge (8×L4): the Seesaw paper (Su et al., "Seesaw:
	// High-throughput LLM Inference via Model Re-sharding", MLSys 2025,
	// §6.1) gives it as 16 GiB/s, taken here as binary gibibytes,
	// 16·2³⁰ = 17,179,869,184 bytes/s. The catalog's other PCIe figures
	// are datasheet decimal GB/s (Gen4 x16: 32 GB/s one way), by which x8
	// would be 16e9 bytes/s (15.75e9 after 128b/130b encoding): the paper's
	// figure is 7.4% above that nominal rate. LinkEfficiency applies on top.
	PCIeGen4x8BytesPerS = 16 * gib
)

// catalogEff is the efficiency of a catalog GPU whose Matmul is matmul.
func catalogEff(matmul float64) Efficiency {
	return Efficiency{
		Matmul: matmul, GEMMHalf: GEMMHalfSize, Memory: MemoryEfficiency, Attention: AttentionEfficiency,
		KernelLatency: KernelLatency, StepOverhead: VLLMStepOverhead,
	}
}

// GEMMCurve is a measured GEMM rate: Peak·s(m)·s(n)·s(k) FLOP/s, with
// s(x) = x/(x+Half) as in Efficiency.
type GEMMCurve struct{ Peak, Half float64 }

// shapeFactor is s(m)·s(n)·s(k) of Efficiency.Matmul's curve.
func shapeFactor(m, n, k, half float64) float64 {
	return m / (m + half) * n / (n + half) * k / (k + half)
}

// matmulFrom returns the asymptotic Matmul efficiency implied by one
// published measurement: flops at shape (m, n, k) on a GPU of dense peak.
func matmulFrom(flops, peak float64, m, n, k int) float64 {
	return flops / peak / shapeFactor(float64(m), float64(n), float64(k), GEMMHalfSize)
}

// Measured matmul anchors: the published point each catalog entry's
// Efficiency.Matmul is derived from.
var (
	// GPU.md: cublasGemmEx BF16 8192³ on the project's H100 SXM, 808 TFLOP/s.
	hopperMatmul = matmulFrom(808e12, 989.4e12, 8192, 8192, 8192)
	// stas00/ml-engineering compute/accelerator, MAMF table: A100 SXM
	// 267.9 TFLOPS at 6912×16384×2048 (CUDA 12.1).
	a100SXMMatmul = matmulFrom(267.9e12, 312e12, 6912, 16384, 2048)
	// Same table: A100 PCIe 256.4 TFLOPS at 2304×5120×1536.
	a100PCIeMatmul = matmulFrom(256.4e12, 312e12, 2304, 5120, 1536)
	// No published L4 measurement; the T4, the same 70 W power class,
	// sustains 24 of 65 FP16 TFLOPS on a 4096³ cuBLAS GEMM because of
	// power capping (NVIDIA developer forum, "About GPU peak performance",
	// topic 264462, answered by NVIDIA).
	lowPowerMatmul = matmulFrom(24e12, 65e12, 4096, 4096, 4096)
)

const (
	gib = 1 << 30
	mib = 1 << 20
)

var catalog = []GPU{
	{
		Name: "H100", names: []string{"h100", "h100-sxm", "h100-sxm5", "h100-80gb"}, devices: []string{"NVIDIA H100 80GB HBM3"},
		MemoryBytes: 80 * gib, HBMBytesPerS: 3.35e12, BF16FLOPS: 989.4e12, FP32FLOPS: 67e12, FP8FLOPS: 1978.9e12,
		NVLinkBytesPerS: 450e9, PCIe: "Gen5 x16", PCIeBytesPerS: 64e9, L2Bytes: 50 * mib,
		Eff: catalogEff(hopperMatmul),
		Sources: []string{
			"NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100), H100 SXM column: 80 GB HBM3, 3.35 TB/s, BF16 1,979* and FP8 3,958* TFLOPS (*with sparsity; dense is half), FP32 67 TFLOPS, NVLink 900 GB/s, PCIe Gen5 128 GB/s (both bidirectional)",
			"NVIDIA H100 architecture whitepaper: 50 MB L2 on H100 SXM5",
			"Matmul efficiency: GPU.md, cublasGemmEx BF16 8192³ = 808 TFLOP/s on the project's H100",
		},
	},
	{
		Name: "H200", names: []string{"h200", "h200-sxm", "h200-141gb"}, devices: []string{"NVIDIA H200"},
		MemoryBytes: 141 * gib, HBMBytesPerS: 4.8e12, BF16FLOPS: 989.4e12, FP32FLOPS: 67e12, FP8FLOPS: 1978.9e12,
		NVLinkBytesPerS: 450e9, PCIe: "Gen5 x16", PCIeBytesPerS: 64e9, L2Bytes: 50 * mib,
		Eff: catalogEff(hopperMatmul),
		Sources: []string{
			"NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200), H200 SXM column: 141 GB HBM3e, 4.8 TB/s, BF16 1,979* and FP8 3,958* TFLOPS (*with sparsity), FP32 67 TFLOPS, NVLink 900 GB/s, PCIe Gen5 128 GB/s",
			"Shift Parallelism paper (papers/000) §4.1.1: 141 GB, 4.8 TB/s, 1,979 dense FP8 TFLOPS, NVSwitch 900 GB/s",
			"Same GH100 die and 700 W limit as H100 SXM: H100's L2 (50 MB) and matmul efficiency",
		},
	},
	{
		Name: "B200", names: []string{"b200", "b200-sxm"}, devices: []string{"NVIDIA B200"},
		MemoryBytes: 180 * gib, HBMBytesPerS: 8e12, BF16FLOPS: 2250e12, FP8FLOPS: 4500e12,
		NVLinkBytesPerS: 900e9, PCIe: "Gen5 x16", PCIeBytesPerS: 64e9, L2Bytes: 126 * mib,
		Eff: catalogEff(hopperMatmul),
		Sources: []string{
			"NVIDIA DGX B200 datasheet: 1,440 GB HBM3e and 64 TB/s for 8 GPUs (180 GB, 8 TB/s each)",
			"NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx): FP16/BF16 36 PFLOPS* and FP8 72 PFLOPS* for 8 GPUs (*sparse; dense 2.25 and 4.5 PFLOPS per GPU), NVLink 5 at 1.8 TB/s per GPU",
			"L2: 126 MB as commonly reported for the two-die B200; NVIDIA's datasheets give no figure",
			"No published matmul measurement: Hopper's efficiency",
		},
	},
	{
		Name: "A100-80GB", names: []string{"a100", "a100-80gb", "a100-sxm", "a100-80gb-sxm", "a100-sxm4-80gb"}, devices: []string{"NVIDIA A100-SXM4-80GB"},
		MemoryBytes: 80 * gib, HBMBytesPerS: 2.039e12, BF16FLOPS: 312e12, FP32FLOPS: 19.5e12,
		NVLinkBytesPerS: 300e9, PCIe: "Gen4 x16", PCIeBytesPerS: 32e9, L2Bytes: 40 * mib,
		Eff: catalogEff(a100SXMMatmul),
		Sources: []string{
			"NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100), A100 80GB SXM column: 80 GB HBM2e, 2,039 GB/s, BF16 312 (624*) TFLOPS, FP32 19.5 TFLOPS, no FP8, NVLink 600 GB/s, PCIe Gen4 64 GB/s",
			"NVIDIA A100 architecture whitepaper: 40 MB L2",
			"Matmul efficiency: stas00/ml-engineering MAMF table, A100 SXM 267.9 TFLOPS at 6912×16384×2048",
		},
	},
	{
		Name: "A100-80GB-PCIe", names: []string{"a100-80gb-pcie", "a100-pcie", "a100-pcie-80gb"}, devices: []string{"NVIDIA A100 80GB PCIe"},
		MemoryBytes: 80 * gib, HBMBytesPerS: 1.935e12, BF16FLOPS: 312e12, FP32FLOPS: 19.5e12,
		PCIe: "Gen4 x16", PCIeBytesPerS: 32e9, L2Bytes: 40 * mib,
		Eff: catalogEff(a100PCIeMatmul),
		Sources: []string{
			"NVIDIA A100 datasheet, A100 80GB PCIe column: 80 GB HBM2e, 1,935 GB/s, BF16 312 (624*) TFLOPS, PCIe Gen4 64 GB/s; its NVLink bridge joins only pairs, so nodes use PCIe",
			"Matmul efficiency: stas00/ml-engineering MAMF table, A100 PCIe 256.4 TFLOPS at 2304×5120×1536",
		},
	},
	{
		Name: "A100-40GB", names: []string{"a100-40gb", "a100-40gb-sxm", "a100-sxm4-40gb"}, devices: []string{"NVIDIA A100-SXM4-40GB"},
		MemoryBytes: 40 * gib, HBMBytesPerS: 1.555e12, BF16FLOPS: 312e12, FP32FLOPS: 19.5e12,
		NVLinkBytesPerS: 300e9, PCIe: "Gen4 x16", PCIeBytesPerS: 32e9, L2Bytes: 40 * mib,
		Eff: catalogEff(a100SXMMatmul),
		Sources: []string{
			"NVIDIA A100 datasheet, A100 40GB SXM column: 40 GB HBM2, 1,555 GB/s, BF16 312 (624*) TFLOPS, NVLink 600 GB/s, PCIe Gen4 64 GB/s",
			"Matmul efficiency: the A100 SXM MAMF row (same chip and power limit)",
		},
	},
	{
		Name: "A100-40GB-PCIe", names: []string{"a100-40gb-pcie", "a100-pcie-40gb"}, devices: []string{"NVIDIA A100-PCIE-40GB"},
		MemoryBytes: 40 * gib, HBMBytesPerS: 1.555e12, BF16FLOPS: 312e12, FP32FLOPS: 19.5e12,
		PCIe: "Gen4 x16", PCIeBytesPerS: 32e9, L2Bytes: 40 * mib,
		Eff: catalogEff(a100PCIeMatmul),
		Sources: []string{
			"NVIDIA A100 datasheet, A100 40GB PCIe column: 40 GB HBM2, 1,555 GB/s, BF16 312 (624*) TFLOPS, PCIe Gen4 64 GB/s; the A100 the Seesaw paper's Table 1 lists (40 GiB, 1,555 GiB/s, 312T) in its PCIe form",
			"Matmul efficiency: the A100 PCIe MAMF row (same chip and power limit)",
		},
	},
	{
		Name: "A10", names: []string{"a10", "a10-pcie"}, devices: []string{"NVIDIA A10"},
		MemoryBytes: 24 * gib, HBMBytesPerS: 600e9, BF16FLOPS: 125e12, FP32FLOPS: 31.2e12,
		PCIe: "Gen4 x16", PCIeBytesPerS: 32e9, L2Bytes: 6 * mib,
		Eff: catalogEff(a100PCIeMatmul),
		Sources: []string{
			"NVIDIA A10 Tensor Core GPU datasheet: 24 GB GDDR6, 600 GB/s, BF16 125 (250*) TFLOPS, FP32 31.2 TFLOPS, no FP8, no NVLink, PCIe Gen4 64 GB/s",
			"GA102 L2: 6 MB (NVIDIA Ampere GA102 whitepaper)",
			"No published matmul measurement: the A100 PCIe MAMF efficiency (same generation)",
		},
	},
	{
		Name: "A10G", names: []string{"a10g"}, devices: []string{"NVIDIA A10G"},
		MemoryBytes: 24 * gib, HBMBytesPerS: 600e9, BF16FLOPS: 70e12, FP32FLOPS: 35e12,
		PCIe: "Gen4 x8", PCIeBytesPerS: PCIeGen4x8BytesPerS, L2Bytes: 6 * mib,
		Eff: catalogEff(a100PCIeMatmul),
		Sources: []string{
			"AWS's variant of the A10, sold only in EC2 G5 instances; NVIDIA publishes no A10G datasheet. Amazon EC2 G5 instance page (aws.amazon.com/ec2/instance-types/g5): 24 GB of GPU memory, 80 RT cores and 320 third-generation Tensor Cores per A10G",
			"Baseten, \"NVIDIA A10 vs A10G for ML model inference\" (baseten.co/blog): the same 24 GB GDDR6 and 600 GB/s as the A10; dense BF16/FP16 tensor 70 TFLOPS (the A10's 125), FP32 35 TFLOPS; no FP8, no NVLink",
			"Host link: PCIe 4.0 x8 per GPU, 16 GiB/s (PCIeGen4x8BytesPerS), as the Seesaw paper (MLSys 2025, §6.1) gives it for g5.48xlarge, the only A10G box with a published link width",
			"GA102 L2: 6 MB (NVIDIA Ampere GA102 whitepaper)",
			"No published matmul measurement: the A100 PCIe MAMF efficiency (same generation), as for the A10",
		},
	},
	{
		Name: "L4", names: []string{"l4", "l4-pcie"}, devices: []string{"NVIDIA L4"},
		MemoryBytes: 24 * gib, HBMBytesPerS: 300e9, BF16FLOPS: 121e12, FP32FLOPS: 30.3e12, FP8FLOPS: 242.5e12,
		PCIe: "Gen4 x16", PCIeBytesPerS: 32e9, L2Bytes: 48 * mib,
		Eff: catalogEff(lowPowerMatmul),
		Sources: []string{
			"NVIDIA L4 Tensor Core GPU datasheet: 24 GB GDDR6, 300 GB/s, BF16 242* and FP8 485* TFLOPS (*sparse), FP32 30.3 TFLOPS, no NVLink, PCIe Gen4 x16 64 GB/s, 72 W",
			"NVIDIA Ada GPU architecture whitepaper: AD104 48 MB L2",
			"Matmul efficiency: the T4 (70 W class) sustains 24 of 65 TFLOPS under power capping (NVIDIA developer forum topic 264462)",
		},
	},
	{
		Name: "H20", names: []string{"h20"}, devices: []string{"NVIDIA H20"},
		MemoryBytes: 96 * gib, HBMBytesPerS: 4.0e12, BF16FLOPS: 148e12, FP32FLOPS: 44e12, FP8FLOPS: 296e12,
		NVLinkBytesPerS: 450e9, PCIe: "Gen5 x16", PCIeBytesPerS: 64e9, L2Bytes: 60 * mib,
		Eff: catalogEff(hopperMatmul),
		Sources: []string{
			"NVIDIA HGX H20 product brief (2024; no public nvidia.com page, figures as reproduced by OEM spec sheets): 96 GB HBM3, 4.0 TB/s, BF16 148 and FP8 296 dense TFLOPS, FP32 44 TFLOPS, NVLink 900 GB/s, PCIe Gen5 128 GB/s, 60 MB L2",
			"Hopper die: H100's matmul efficiency",
		},
	},
	{
		Name: "H20-141GB", names: []string{"h20-141gb", "h20-144gb"},
		MemoryBytes: 141 * gib, HBMBytesPerS: 4.8e12, BF16FLOPS: 148e12, FP32FLOPS: 44e12, FP8FLOPS: 296e12,
		NVLinkBytesPerS: 450e9, PCIe: "Gen5 x16", PCIeBytesPerS: 64e9, L2Bytes: 60 * mib,
		Eff: catalogEff(hopperMatmul),
		Sources: []string{
			"The SiDP paper's H20 node (papers/001, Table 1): 144 GB per GPU and NVLink 4, the H20 sold with 141 GB of HBM3e (the H200's six stacks; 144 GB is the driver's figure in decimal units)",
			"HBM bandwidth 4.8 TB/s: the H200's HBM3e stacks (inferred; specs/sidp.md §4 gives 4.0–4.8 TB/s by SKU); compute, L2 and links: the H20 entry above",
			"Hopper die: H100's matmul efficiency",
		},
	},
}

// GPUs returns a copy of the catalog, in a fixed order.
func GPUs() []GPU {
	out := make([]GPU, len(catalog))
	for i, g := range catalog {
		out[i] = g.clone()
	}
	return out
}

func (g GPU) clone() GPU {
	g.Sources, g.names, g.devices = slices.Clone(g.Sources), slices.Clone(g.names), slices.Clone(g.devices)
	return g
}

// MatchGPU finds the catalog GPU that a CUDA device name denotes, as
// cuDeviceGetName and nvidia-smi give it, ignoring case and spacing:
// "NVIDIA H100 80GB HBM3" is the H100 (SXM5) entry, "NVIDIA H200" the
// H200. Only the exact part an entry describes matches: an "NVIDIA H100
// PCIe" or "NVIDIA H100 NVL" has other clocks, power and links than the
// H100 SXM entry, and matches nothing.
func MatchGPU(device string) (GPU, bool) {
	key := strings.Join(strings.Fields(device), " ")
	for _, g := range catalog {
		for _, d := range g.devices {
			if strings.EqualFold(d, key) {
				return g.clone(), true
			}
		}
	}
	return GPU{}, false
}

// LookupGPU finds a catalog GPU by any of its spellings, ignoring case:
// "H200", "h100-sxm", "A100-80GB-PCIe", "A10-pcie".
func LookupGPU(name string) (GPU, error) {
	g, err := lookupGPU(name)
	if err != nil {
		return GPU{}, fmt.Errorf("sim: %w", err)
	}
	return g, nil
}

func lookupGPU(name string) (GPU, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	for _, g := range catalog {
		if slices.Contains(g.names, key) {
			return g.clone(), nil
		}
	}
	if key == "cpu" {
		return GPU{}, fmt.Errorf("cpu nodes come from a calibration profile (gearbox calibrate): load it with LoadProfile and call Profile.Node")
	}
	return GPU{}, fmt.Errorf("unknown GPU %q (known: %s)", name, strings.Join(knownGPUs(), ", "))
}

func knownGPUs() []string {
	var out []string
	for _, g := range catalog {
		out = append(out, g.names...)
	}
	return out
}

// LinkKind names the fabric a collective runs over.
type LinkKind string

const (
	NVLink    LinkKind = "nvlink"     // NVLink through NVSwitch (every catalog SXM part)
	PCIe      LinkKind = "pcie"       // peer-to-peer over PCIe
	InProcess LinkKind = "in-process" // the CPU engine's shared-memory transport
)

// Link is the fabric between the GPUs of a node, as an alpha-beta model:
// an algorithm step costs HopLatency, and the bytes a member sends move
// at BytesPerS·Efficiency.
type Link struct {
	Kind       LinkKind
	BytesPerS  float64 // per GPU, one direction
	HopLatency float64 // seconds per algorithm step
	Efficiency float64 // fraction of BytesPerS large messages reach
}

// HostLink is the link between one GPU and host memory, which
// host↔device copies (CostModel.HostCopy) cross: its PCIe generation and
// width, and its bandwidth in one direction. Each GPU of a node has its
// own.
type HostLink struct {
	PCIe      string  // e.g. "Gen4 x8"
	BytesPerS float64 // one direction
	Source    string  // where the figure comes from
}

// hostLinks are the host links a node spec may name after "@" where a
// box wires its GPUs narrower than their own interface (ParseNode).
var hostLinks = map[string]HostLink{
	"pcie4x8": {PCIe: "Gen4 x8", BytesPerS: PCIeGen4x8BytesPerS,
		Source: "Seesaw paper (Su et al., MLSys 2025) §6.1: each GPU of AWS g5.48xlarge and g6.48xlarge on PCIe 4.0 x8, 16 GiB/s"},
}

// nodeAliases are whole boxes named by their cloud instance type.
var nodeAliases = map[string]string{
	"g5.48xlarge":  "8xA10G@pcie4x8", // AWS: 8×A10G, PCIe 4.0 x8 per GPU (Seesaw paper §6.1)
	"g6.48xlarge":  "8xL4@pcie4x8",   // AWS: 8×L4, PCIe 4.0 x8 per GPU (Seesaw paper §6.1)
	"p4d.24xlarge": "8xA100-40GB",    // AWS: 8×A100-40GB SXM on NVSwitch (600 GB/s); its network is network.go's
}

// Node is Count GPUs of one type joined by one link, each GPU with its own
// link to host memory.
type Node struct {
	GPU   GPU
	Count int
	Link  Link
	// Host is each GPU's link to host memory: the GPU's own PCIe
	// interface unless the box wires it narrower (WithHost). The zero
	// value means the GPU's PCIe figure (or, without one, a memory copy).
	Host HostLink
	// hostName is the hostLinks key the node was given, for String.
	hostName string
}

// String writes the node as ParseNode reads it, e.g. "8xH200", or
// "8xL4@pcie4x8" for a node whose host links differ from its GPUs' own.
func (n Node) String() string {
	s := fmt.Sprintf("%dx%s", n.Count, n.GPU.Name)
	if n.hostName != "" {
		s += "@" + n.hostName
	}
	return s
}

// NewNode builds a node of count GPUs of g with g's own links: NVLink
// between the GPUs when the GPU has it, else PCIe; and g's PCIe interface
// to the host.
func NewNode(g GPU, count int) (Node, error) {
	if count < 1 {
		return Node{}, fmt.Errorf("sim: a node needs at least one GPU, got %d", count)
	}
	l := Link{Kind: PCIe, BytesPerS: g.PCIeBytesPerS, HopLatency: PCIeHopLatency, Efficiency: LinkEfficiency}
	if g.NVLinkBytesPerS > 0 {
		l = Link{Kind: NVLink, BytesPerS: g.NVLinkBytesPerS, HopLatency: NVLinkHopLatency, Efficiency: LinkEfficiency}
	}
	return Node{GPU: g, Count: count, Link: l, Host: HostLink{PCIe: g.PCIe, BytesPerS: g.PCIeBytesPerS}}, nil
}

// WithHost returns the node with every GPU's host link h. On a PCIe node
// the GPUs' peer-to-peer traffic crosses the same per-GPU links, so the
// collective link's bandwidth becomes h's too; an NVLink node keeps its
// NVLink.
func (n Node) WithHost(h HostLink) Node {
	n.Host, n.hostName = h, ""
	for name, k := range hostLinks {
		if k == h {
			n.hostName = name
		}
	}
	if n.Link.Kind == PCIe {
		n.Link.BytesPerS = h.BytesPerS
	}
	return n
}

// ParseNode reads a node written COUNTxGPU[@HOST]: "8xH200", "4xA10-pcie",
// "8xA100-80gb-pcie", "2xL4", "8xL4@pcie4x8". A bare GPU name is one GPU.
// The GPU names are LookupGPU's. HOST names a host link narrower than the
// GPU's own interface (WithHost); the one known is "pcie4x8", PCIe 4.0 x8
// at PCIeGen4x8BytesPerS. An AWS instance type names its whole box:
// "g5.48xlarge" is 8xA10G@pcie4x8 (the A10G's own link is already x8) and
// "g6.48xlarge" 8xL4@pcie4x8 (the L4 card is x16; a plain 8xL4 keeps it).
func ParseNode(s string) (Node, error) {
	t := strings.TrimSpace(s)
	if a, ok := nodeAliases[strings.ToLower(t)]; ok {
		t = a
	}
	host, hasHost := "", false
	if i := strings.LastIndexByte(t, '@'); i >= 0 {
		t, host, hasHost = t[:i], strings.ToLower(strings.TrimSpace(t[i+1:])), true
	}
	count, name := 1, t
	if i := strings.IndexAny(t, "xX"); i > 0 {
		if n, err := strconv.Atoi(t[:i]); err == nil {
			count, name = n, t[i+1:]
		}
	}
	if count < 1 || count > 1024 {
		return Node{}, fmt.Errorf("sim: node %q: GPU count must be in [1, 1024]", s)
	}
	g, err := lookupGPU(name)
	if err != nil {
		return Node{}, fmt.Errorf("sim: node %q: %w", s, err)
	}
	n, err := NewNode(g, count)
	if err != nil || !hasHost {
		return n, err
	}
	h, ok := hostLinks[host]
	if !ok {
		known := slices.Sorted(maps.Keys(hostLinks))
		return Node{}, fmt.Errorf("sim: node %q: unknown host link %q (known: %s)", s, host, strings.Join(known, ", "))
	}
	return n.WithHost(h), nil
}
