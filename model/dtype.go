package model

import (
	"fmt"
	"strings"

	"github.com/gearboxlm/gearbox/model/safetensors"
)

// DType is the element type a backend keeps weights and activations in,
// chosen with vLLM's --dtype flag.
type DType int

// The dtypes; DTypeAuto resolves per model and device (ResolveDType).
const (
	DTypeAuto DType = iota
	Float32
	Float16
	BFloat16
)

// ParseDType reads a --dtype value: auto, float32 (float), float16 (half)
// or bfloat16, as vLLM spells them.
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return DTypeAuto, nil
	case "float32", "float":
		return Float32, nil
	case "float16", "half":
		return Float16, nil
	case "bfloat16":
		return BFloat16, nil
	}
	return 0, fmt.Errorf("model: dtype %q: want auto, bfloat16, float16 or float32", s)
}

// String is the vLLM spelling.
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return "auto"
}

// Size is the bytes per element; 0 for DTypeAuto.
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float16, BFloat16:
		return 2
	}
	return 0
}

// ResolveDType turns auto into a concrete dtype the way vLLM documents it
// for GPUs: BF16 for BF16 checkpoints and FP16 for FP32 and FP16 ones
// (and for checkpoints that declare no dtype). A concrete d is returned
// unchanged.
func (c *Config) ResolveDType(d DType) DType {
	if d != DTypeAuto {
		return d
	}
	if strings.EqualFold(c.TorchDtype, "bfloat16") {
		return BFloat16
	}
	return Float16
}

// Round rounds v in place to d's precision (nearest, ties to even), the
// values a backend holding d would see. Float32 and DTypeAuto leave v
// unchanged.
func (d DType) Round(v []float32) {
	switch d {
	case BFloat16:
		for i, f := range v {
			v[i] = safetensors.BF16ToFloat32(safetensors.Float32ToBF16(f))
		}
	case Float16:
		for i, f := range v {
			v[i] = safetensors.F16ToFloat32(safetensors.Float32ToF16(f))
		}
	}
}

// Tensors lists every weight tensor once (a tied LM head is listed only as
// the embedding), nil optional tensors left out.
func (w *Weights) Tensors() [][]float32 {
	out := [][]float32{w.Embed, w.Norm}
	if len(w.LMHead) > 0 && (len(w.Embed) == 0 || &w.LMHead[0] != &w.Embed[0]) {
		out = append(out, w.LMHead)
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		for _, t := range [][]float32{l.AttnNorm, l.WQ, l.WK, l.WV, l.BQ, l.BK, l.BV, l.QNorm, l.KNorm, l.WO, l.BO,
			l.MLPNorm, l.WGate, l.WUp, l.WDown, l.BGate, l.BUp, l.BDown} {
			if t != nil {
				out = append(out, t)
			}
		}
	}
	return out
}
