package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
)

// ProfileVersion is the Profile file format this package reads and writes.
// Fields added since (dtype, logits_bytes_per_s) are optional, so files
// written before them still read as CPU profiles.
const ProfileVersion = 1

// Profile dtypes (Profile.DType): what the engine stored and computed in
// while it was measured.
const (
	ProfileFloat32  = ""         // the CPU engine: float32 weights, activations and KV cache
	ProfileBFloat16 = "bfloat16" // a GPU under the CUDA executor: bfloat16 weights, activations and KV cache
)

// Profile is a machine measured by gearbox calibrate: the cost model's
// inputs for a device measured rather than taken from the catalog, either
// the CPU engine's host or one GPU as Gearbox's CUDA executor runs it. It
// is stored as JSON; every field is a measurement, none is a datasheet.
type Profile struct {
	Version int    `json:"version"` // ProfileVersion
	Name    string `json:"name"`    // the processor as the OS names it, or the GPU as CUDA does ("NVIDIA H100 80GB HBM3")
	// DType is ProfileFloat32 (the CPU engine) or ProfileBFloat16 (a GPU).
	DType        string  `json:"dtype,omitempty"`
	Threads      int     `json:"threads,omitempty"` // CPU: kernel threads the measurements used; 0 for a GPU
	MemoryBytes  int64   `json:"memory_bytes"`      // memory available to the engine
	MemBytesPerS float64 `json:"mem_bytes_per_s"`   // streaming bandwidth (bytes read + written per second)
	L2Bytes      float64 `json:"l2_bytes"`          // last-level cache; 0 disables the cache-reuse term

	// GEMM is the measured throughput of the engine's GEMM by shape, in
	// the profile's dtype: out[m, n] = in[m, k]·w[n, k]ᵀ.
	GEMM []GEMMPoint `json:"gemm"`
	// GEMMWeights is the same for the CPU engine's other weight formats,
	// by dtype name ("bfloat16", "float16"), over the same shapes: each
	// format has its own kernels (bfloat16 pairs, half widened to
	// float32). A profile without a format cannot price its checkpoints.
	GEMMWeights map[string][]GEMMPoint `json:"gemm_weights,omitempty"`

	// AttentionGFLOPS is the measured throughput of the engine's paged
	// attention (4·head_dim flops per query·key pair).
	AttentionGFLOPS float64 `json:"attention_gflops"`
	// AttentionDecodeGFLOPS is the same for decode steps (one query per
	// sequence over its cached keys); 0 means AttentionGFLOPS.
	AttentionDecodeGFLOPS float64 `json:"attention_decode_gflops,omitempty"`

	// Link is the collectives' alpha-beta fit over the in-process
	// transport: seconds per algorithm step and bytes per second one
	// member moves. A GPU profile has none: one GPU cannot measure its
	// NVLink or PCIe peers (see GPU).
	Link AlphaBeta `json:"link,omitzero"`

	KernelLatencyS float64 `json:"kernel_latency_s"` // fixed cost of one kernel call (in a CUDA graph on a GPU)
	// LaunchLatencyS is the host's time to launch one kernel on its own,
	// where the engine launches some steps' kernels one by one (the GPU
	// executor's prefill and mixed steps, which take at least their
	// kernel count times this); 0 means no such bound.
	LaunchLatencyS float64 `json:"launch_latency_s,omitempty"`
	StepOverheadS  float64 `json:"step_overhead_s"` // engine host time per step
	// LogitsBytesPerS is the rate at which a step's float32 logits reach
	// the host for sampling (a GPU: device-to-host copy into the
	// executor's page-locked output buffer); 0 when they are computed in
	// host memory (the CPU engine).
	LogitsBytesPerS float64 `json:"logits_bytes_per_s,omitempty"`
}

// IsGPU reports whether the profile describes a GPU (DType
// ProfileBFloat16) rather than the CPU engine's host.
func (p *Profile) IsGPU() bool { return p.DType == ProfileBFloat16 }

// Precision is what the profiled engine stores and computes in: float32
// everywhere on the CPU (CPUPrecision), bfloat16 everywhere on a GPU.
func (p *Profile) Precision() Precision {
	if p.IsGPU() {
		return Precision{Weights: BF16, Activations: BF16, KV: BF16}
	}
	return CPUPrecision
}

// GEMMPoint is one measured GEMM shape.
type GEMMPoint struct {
	M      int     `json:"m"`
	N      int     `json:"n"`
	K      int     `json:"k"`
	GFLOPS float64 `json:"gflops"` // 2·m·n·k / seconds / 1e9
}

// AlphaBeta is a collective cost model: Hop seconds per algorithm step
// plus bytes / BytesPerS.
type AlphaBeta struct {
	HopS      float64 `json:"hop_s"`
	BytesPerS float64 `json:"bytes_per_s"`
}

// Validate checks that every measurement is present and positive. A GPU
// profile has no thread count and no link.
func (p *Profile) Validate() error {
	gpu := p.IsGPU()
	switch {
	case p.Version != ProfileVersion:
		return fmt.Errorf("sim: profile version %d, this build reads version %d (re-run gearbox calibrate)", p.Version, ProfileVersion)
	case p.DType != ProfileFloat32 && p.DType != ProfileBFloat16:
		return fmt.Errorf("sim: profile dtype %q, want %q (a GPU) or none (the CPU engine's float32)", p.DType, ProfileBFloat16)
	case p.Name == "":
		return errors.New("sim: profile has no name")
	case !gpu && p.Threads < 1:
		return fmt.Errorf("sim: profile threads %d, want at least 1", p.Threads)
	case gpu && p.Threads != 0:
		return fmt.Errorf("sim: GPU profile has threads %d; threads describe a CPU", p.Threads)
	case p.MemoryBytes <= 0 || !(p.MemBytesPerS > 0) || p.L2Bytes < 0:
		return fmt.Errorf("sim: profile memory %d bytes at %g bytes/s (L2 %g) must be positive", p.MemoryBytes, p.MemBytesPerS, p.L2Bytes)
	case !(p.AttentionGFLOPS > 0) || p.AttentionDecodeGFLOPS < 0:
		return fmt.Errorf("sim: profile attention_gflops %g must be positive (decode %g not negative)", p.AttentionGFLOPS, p.AttentionDecodeGFLOPS)
	case len(p.GEMM) == 0:
		return errors.New("sim: profile has no GEMM measurements")
	case !(p.Link.HopS >= 0) || !(p.Link.BytesPerS >= 0) || !gpu && p.Link.BytesPerS == 0:
		return fmt.Errorf("sim: profile link %+v: hop_s must be ≥ 0 and bytes_per_s positive", p.Link)
	case !(p.KernelLatencyS >= 0) || !(p.LaunchLatencyS >= 0) || !(p.StepOverheadS >= 0):
		return fmt.Errorf("sim: profile kernel latency %g s, launch latency %g s and step overhead %g s must not be negative", p.KernelLatencyS, p.LaunchLatencyS, p.StepOverheadS)
	case !(p.LogitsBytesPerS >= 0) || math.IsInf(p.LogitsBytesPerS, 0):
		return fmt.Errorf("sim: profile logits_bytes_per_s %g must be finite and not negative", p.LogitsBytesPerS)
	}
	if err := validGEMM("GEMM", p.GEMM); err != nil {
		return err
	}
	if gpu && len(p.GEMMWeights) > 0 {
		return errors.New("sim: GPU profile has gemm_weights; they describe the CPU engine's weight formats")
	}
	for name, points := range p.GEMMWeights {
		if d, err := ParseDType(name); err != nil || (d != BF16 && d != FP16 && d != Q8) || name != d.Name() {
			return fmt.Errorf("sim: profile gemm_weights %q: want bfloat16, float16 or q8_0", name)
		}
		if len(points) == 0 {
			return fmt.Errorf("sim: profile gemm_weights %q has no measurements", name)
		}
		if err := validGEMM(name+" GEMM", points); err != nil {
			return err
		}
	}
	return nil
}

func validGEMM(what string, points []GEMMPoint) error {
	for i, g := range points {
		if g.M < 1 || g.N < 1 || g.K < 1 || !(g.GFLOPS > 0) || math.IsInf(g.GFLOPS, 0) {
			return fmt.Errorf("sim: profile %s point %d %+v: sizes and gflops must be positive", what, i, g)
		}
	}
	return nil
}

// CheckPrecision reports whether the profile can price prec: a CPU
// profile prices float32 weights from GEMM and bfloat16 or float16 ones
// from GEMMWeights (profiles written before it lack them), a GPU profile
// bfloat16 ones.
func (p *Profile) CheckPrecision(prec Precision) error {
	if p.IsGPU() || prec.Weights == FP32 {
		return nil
	}
	if _, ok := p.GEMMWeights[prec.Weights.Name()]; !ok {
		return fmt.Errorf("sim: profile of %s has no GEMM measurements with %s weights (re-run gearbox calibrate, or simulate --dtype float32)", p.Name, prec.Weights.Name())
	}
	return nil
}

// LoadProfile reads and validates a profile file.
func LoadProfile(path string) (*Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParseProfile decodes and validates profile JSON; unknown fields are an
// error, so a misspelt measurement is not silently zero.
func ParseProfile(data []byte) (*Profile, error) {
	var p Profile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("sim: profile: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Save validates p and writes it to path as indented JSON.
func (p *Profile) Save(path string) error {
	if err := p.Validate(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// GPU returns the profile as a device of the cost model. The GEMM curve
// of Efficiency is fitted to the measured points: the half size h
// minimises the squared log error of rate = peak·s(m)·s(n)·s(k) over a
// geometric grid from 1 to 8192, and the peak is the geometric-mean
// asymptote at that h. Efficiency.Matmul and Memory are 1 (the fitted peak
// and the measured bandwidth already are what the kernels reach);
// Efficiency.Attention is the measured attention rate over the peak the
// cost model runs attention at. Bandwidth, kernel latency, step overhead
// and the logits rate are the measured ones.
//
// A CPU profile is a device named "cpu" whose float32 GEMMs the cost model
// runs at half of BF16FLOPS (TF32 on GPUs), so BF16FLOPS is twice the
// fitted float32 rate; the curves fitted to GEMMWeights price GEMMs with
// those weights (GPU.WeightGEMM); it has no host link.
//
// A GPU profile (ProfileBFloat16) is a device named as CUDA names it, whose
// BF16FLOPS is the fitted bfloat16 rate itself. What one GPU cannot
// measure comes from the catalog entry MatchGPU finds for that name: the
// PCIe and NVLink bandwidths, and the FP8 peak as the entry's FP8:BF16
// ratio times the fitted peak. Without an entry the GPU has no links (a
// node of one) and no FP8 tensor cores, and its host copies run at the
// memory bandwidth.
func (p *Profile) GPU() (GPU, error) {
	if err := p.Validate(); err != nil {
		return GPU{}, err
	}
	h, peak := fitGEMM(p.GEMM)
	eff := Efficiency{
		Matmul: 1, GEMMHalf: h, Memory: 1, Attention: p.AttentionGFLOPS * 1e9 / peak,
		AttentionDecode: p.AttentionDecodeGFLOPS * 1e9 / peak,
		KernelLatency:   p.KernelLatencyS, LaunchLatency: p.LaunchLatencyS, StepOverhead: p.StepOverheadS,
		LogitsBytesPerS: p.LogitsBytesPerS,
	}
	if !p.IsGPU() {
		g := GPU{
			Name: "cpu", MemoryBytes: p.MemoryBytes, HBMBytesPerS: p.MemBytesPerS, BF16FLOPS: 2 * peak,
			PCIe: "none", L2Bytes: p.L2Bytes, Eff: eff,
			Sources: []string{fmt.Sprintf("gearbox calibrate profile of %s (%d threads)", p.Name, p.Threads)},
		}
		for name, points := range p.GEMMWeights {
			d, _ := ParseDType(name) // Validate checked it
			h, peak := fitGEMM(points)
			if g.WeightGEMM == nil {
				g.WeightGEMM = map[DType]GEMMCurve{}
			}
			g.WeightGEMM[d] = GEMMCurve{Peak: peak, Half: h}
		}
		return g, nil
	}
	g := GPU{
		Name: p.Name, MemoryBytes: p.MemoryBytes, HBMBytesPerS: p.MemBytesPerS, BF16FLOPS: peak,
		PCIe: "unknown", L2Bytes: p.L2Bytes, Eff: eff,
		Sources: []string{fmt.Sprintf("gearbox calibrate --device cuda profile of %s (bfloat16)", p.Name)},
	}
	if c, ok := MatchGPU(p.Name); ok {
		g.PCIe, g.PCIeBytesPerS, g.NVLinkBytesPerS = c.PCIe, c.PCIeBytesPerS, c.NVLinkBytesPerS
		if c.FP8FLOPS > 0 {
			g.FP8FLOPS = peak * c.FP8FLOPS / c.BF16FLOPS
		}
		g.Sources = append(g.Sources, fmt.Sprintf("PCIe, NVLink and the FP8:BF16 peak ratio: the catalog's %s (datasheet; one GPU cannot measure them)", c.Name))
	}
	return g, nil
}

// fitGEMM fits the cost model's GEMM curve, rate = peak·s(m)·s(n)·s(k),
// to points (see Profile.GPU) and returns the half size and the peak in
// FLOP/s.
func fitGEMM(points []GEMMPoint) (half, peak float64) {
	bestErr := math.Inf(1)
	for i := 0; i <= 104; i++ {
		h := math.Pow(2, float64(i)/8) // 1 … 8192
		var sum float64
		for _, g := range points {
			sum += math.Log(g.GFLOPS * 1e9 / shapeFactor(float64(g.M), float64(g.N), float64(g.K), h))
		}
		logPeak := sum / float64(len(points))
		var sse float64
		for _, g := range points {
			d := math.Log(g.GFLOPS*1e9) - logPeak - math.Log(shapeFactor(float64(g.M), float64(g.N), float64(g.K), h))
			sse += d * d
		}
		if sse < bestErr-1e-12 {
			half, peak, bestErr = h, math.Exp(logPeak), sse
		}
	}
	return half, peak
}

// Node returns count devices of the profile. CPU ranks are joined by the
// in-process transport the profile measured. GPUs are joined as the
// catalog joins them (NewNode: NVLink where the GPU has it, else PCIe),
// with the links of the catalog entry the GPU matched; a GPU that matched
// none makes nodes of one.
func (p *Profile) Node(count int) (Node, error) {
	g, err := p.GPU()
	if err != nil {
		return Node{}, err
	}
	if count < 1 {
		return Node{}, fmt.Errorf("sim: a node needs at least one rank, got %d", count)
	}
	if p.IsGPU() {
		if count > 1 && !(g.NVLinkBytesPerS > 0 || g.PCIeBytesPerS > 0) {
			return Node{}, fmt.Errorf("sim: profile of %q: no catalog entry gives this GPU's links, so it describes one GPU only", p.Name)
		}
		return NewNode(g, count)
	}
	return Node{GPU: g, Count: count, Link: Link{Kind: InProcess, BytesPerS: p.Link.BytesPerS, HopLatency: p.Link.HopS, Efficiency: 1}}, nil
}
