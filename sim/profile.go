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
const ProfileVersion = 1

// Profile is a machine measured by gearbox calibrate: the cost model's
// inputs for a node the catalog cannot describe, the CPU engine's host. It
// is stored as JSON; every field is a measurement, none is a datasheet.
type Profile struct {
	Version      int     `json:"version"`         // ProfileVersion
	Name         string  `json:"name"`            // the processor as the OS names it
	Threads      int     `json:"threads"`         // kernel threads the measurements used
	MemoryBytes  int64   `json:"memory_bytes"`    // memory available to the engine
	MemBytesPerS float64 `json:"mem_bytes_per_s"` // streaming bandwidth (bytes read + written per second)
	L2Bytes      float64 `json:"l2_bytes"`        // last-level cache; 0 disables the cache-reuse term

	// GEMM is the measured throughput of the engine's float32 GEMM by
	// shape: out[m, n] = in[m, k]·w[n, k]ᵀ.
	GEMM []GEMMPoint `json:"gemm"`

	// AttentionGFLOPS is the measured throughput of the engine's paged
	// attention (4·head_dim flops per query·key pair).
	AttentionGFLOPS float64 `json:"attention_gflops"`
	// AttentionDecodeGFLOPS is the same for decode steps (one query per
	// sequence over its cached keys); 0 means AttentionGFLOPS.
	AttentionDecodeGFLOPS float64 `json:"attention_decode_gflops,omitempty"`

	// Link is the collectives' alpha-beta fit over the in-process
	// transport: seconds per algorithm step and bytes per second one
	// member moves.
	Link AlphaBeta `json:"link"`

	KernelLatencyS float64 `json:"kernel_latency_s"` // fixed cost of one kernel call
	StepOverheadS  float64 `json:"step_overhead_s"`  // engine host time per step
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

// Validate checks that every measurement is present and positive.
func (p *Profile) Validate() error {
	switch {
	case p.Version != ProfileVersion:
		return fmt.Errorf("sim: profile version %d, this build reads version %d (re-run gearbox calibrate)", p.Version, ProfileVersion)
	case p.Name == "":
		return errors.New("sim: profile has no name")
	case p.Threads < 1:
		return fmt.Errorf("sim: profile threads %d, want at least 1", p.Threads)
	case p.MemoryBytes <= 0 || !(p.MemBytesPerS > 0) || p.L2Bytes < 0:
		return fmt.Errorf("sim: profile memory %d bytes at %g bytes/s (L2 %g) must be positive", p.MemoryBytes, p.MemBytesPerS, p.L2Bytes)
	case !(p.AttentionGFLOPS > 0):
		return fmt.Errorf("sim: profile attention_gflops %g must be positive", p.AttentionGFLOPS)
	case len(p.GEMM) == 0:
		return errors.New("sim: profile has no GEMM measurements")
	case !(p.Link.HopS >= 0) || !(p.Link.BytesPerS > 0):
		return fmt.Errorf("sim: profile link %+v: hop_s must be ≥ 0 and bytes_per_s positive", p.Link)
	case !(p.KernelLatencyS >= 0) || !(p.StepOverheadS >= 0):
		return fmt.Errorf("sim: profile kernel latency %g s and step overhead %g s must not be negative", p.KernelLatencyS, p.StepOverheadS)
	}
	for i, g := range p.GEMM {
		if g.M < 1 || g.N < 1 || g.K < 1 || !(g.GFLOPS > 0) || math.IsInf(g.GFLOPS, 0) {
			return fmt.Errorf("sim: profile GEMM point %d %+v: sizes and gflops must be positive", i, g)
		}
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

// GPU returns the profile as a device of the cost model, named "cpu". The
// GEMM curve of Efficiency is fitted to the measured points: the half size
// h minimises the squared log error of rate = peak·s(m)·s(n)·s(k) over a
// geometric grid from 1 to 8192, and the peak is the geometric-mean
// asymptote at that h. The cost model runs float32 activations at half of
// BF16FLOPS (TF32 on GPUs), so BF16FLOPS is twice the fitted float32 rate
// and Efficiency.Matmul is 1; Efficiency.Attention is the measured
// attention rate over the same float32 rate. Bandwidth, kernel latency and
// step overhead are the measured ones.
func (p *Profile) GPU() (GPU, error) {
	if err := p.Validate(); err != nil {
		return GPU{}, err
	}
	bestH, bestPeak, bestErr := 0.0, 0.0, math.Inf(1)
	for i := 0; i <= 104; i++ {
		h := math.Pow(2, float64(i)/8) // 1 … 8192
		var sum float64
		for _, g := range p.GEMM {
			sum += math.Log(g.GFLOPS * 1e9 / shapeFactor(float64(g.M), float64(g.N), float64(g.K), h))
		}
		logPeak := sum / float64(len(p.GEMM))
		var sse float64
		for _, g := range p.GEMM {
			d := math.Log(g.GFLOPS*1e9) - logPeak - math.Log(shapeFactor(float64(g.M), float64(g.N), float64(g.K), h))
			sse += d * d
		}
		if sse < bestErr-1e-12 {
			bestH, bestPeak, bestErr = h, math.Exp(logPeak), sse
		}
	}
	return GPU{
		Name: "cpu", MemoryBytes: p.MemoryBytes, HBMBytesPerS: p.MemBytesPerS, BF16FLOPS: 2 * bestPeak,
		PCIe: "none", L2Bytes: p.L2Bytes,
		Eff: Efficiency{
			Matmul: 1, GEMMHalf: bestH, Memory: 1, Attention: p.AttentionGFLOPS * 1e9 / bestPeak,
			AttentionDecode: p.AttentionDecodeGFLOPS * 1e9 / bestPeak,
			KernelLatency:   p.KernelLatencyS, StepOverhead: p.StepOverheadS,
		},
		Sources: []string{fmt.Sprintf("gearbox calibrate profile of %s (%d threads)", p.Name, p.Threads)},
	}, nil
}

// Node returns count ranks of the profiled machine joined by the
// in-process transport.
func (p *Profile) Node(count int) (Node, error) {
	g, err := p.GPU()
	if err != nil {
		return Node{}, err
	}
	if count < 1 {
		return Node{}, fmt.Errorf("sim: a node needs at least one rank, got %d", count)
	}
	return Node{GPU: g, Count: count, Link: Link{Kind: InProcess, BytesPerS: p.Link.BytesPerS, HopLatency: p.Link.HopS, Efficiency: 1}}, nil
}
